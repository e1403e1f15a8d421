/* libFuzzer harness: kernelctl history's paging. The input is a line of JSON params, then a cell journal (as the
 * daemon may find it after a crash). protocol_history_params() must take any params: an offset and a limit within
 * bounds, or -EINVAL with a reason. journal_page() from that offset must give at most limit consecutive cells and
 * an honest next; paging from 0 with that limit and a small byte budget must visit every cell once, in order, and
 * end. */
#include "fuzz-util.h"
#include "journal.h"
#include "protocol.h"

#define FUZZ_MAX (64 * 1024)
#define PAGE_BYTES 4096 /* small, so that byte-bound pages and cut cells come up */
#define LIMIT_MAX 1000

static void check_page(const Journal *j, size_t offset, size_t limit, const JournalPageCell *cells, size_t n,
                       long long next) {
        FUZZ_CHECK(n <= limit);
        for (size_t i = 0; i < n; i++) {
                FUZZ_CHECK(cells[i].index == offset + i);
                FUZZ_CHECK(cells[i].e.code && cells[i].e.client);
                FUZZ_CHECK(!cells[i].truncated || cells[i].e.code_len >= 1024);
        }
        if (offset >= j->n)
                FUZZ_CHECK(n == 0 && next == -1);
        else
                FUZZ_CHECK(n > 0 &&
                           (next == -1 ? offset + n == j->n : (size_t) next == offset + n && next < (long long) j->n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nl = memchr(data, '\n', size);
        size_t plen = nl ? (size_t) (nl - data) : size, offset, limit, n, visited = 0;
        int dirfd = fuzz_state_dir(JOURNAL_DIR);
        JournalPageCell *cells;
        json_t *params;
        char *why = NULL;
        long long next;
        Journal *j = NULL;
        int r;

        params = json_loadb((const char *) data, plen, JSON_DECODE_ANY, NULL);
        r = protocol_history_params(params, 100, LIMIT_MAX, &offset, &limit, &why);
        json_decref(params);
        FUZZ_CHECK(r == 0 ? !why && limit >= 1 && limit <= LIMIT_MAX && offset <= INT64_MAX : r == -EINVAL && why);
        free(why);
        if (r < 0)
                return 0;

        fuzz_write(fuzz_path(1, "state/" JOURNAL_DIR "/fuzz.journal"), nl ? nl + 1 : data, nl ? size - plen - 1 : 0);
        FUZZ_CHECK(journal_open(dirfd, "fuzz", FUZZ_MAX, &j) == 0);
        FUZZ_CHECK(journal_page(j, offset, limit, PAGE_BYTES, &cells, &n, &next) == 0);
        check_page(j, offset, limit, cells, n, next);
        journal_page_free(cells, n);

        for (size_t at = 0;;) {
                FUZZ_CHECK(journal_page(j, at, limit, PAGE_BYTES, &cells, &n, &next) == 0);
                check_page(j, at, limit, cells, n, next);
                journal_page_free(cells, n);
                visited += n;
                if (next < 0)
                        break;
                at = (size_t) next;
        }
        FUZZ_CHECK(visited == j->n);
        journal_free(j);
        return 0;
}

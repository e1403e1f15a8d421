/* libFuzzer harness: the cell journal as the daemon finds it after a crash, a torn write or a corruption. The input
 * is journals/fuzz.journal; journal_open() must take any content (cutting what it cannot trust), every cell it kept
 * must read back, a second open must cut nothing more, and a cell appended then must be there after a reopen. */
#include <fcntl.h>

#include "fuzz-util.h"
#include "journal.h"

#define FUZZ_MAX (64 * 1024)

static void read_all(Journal *j) {
        for (size_t i = 0; i < j->n; i++) {
                JournalEntry e = {};

                FUZZ_CHECK(journal_read(j, i, &e) == 0);
                FUZZ_CHECK(e.outcome >= 0 && e.outcome < _CELL_OUTCOME_MAX);
                FUZZ_CHECK(strlen(e.client) <= JOURNAL_CLIENT_MAX);
                journal_entry_done(&e);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int dirfd = fuzz_state_dir(JOURNAL_DIR);
        JournalEntry cell = { .outcome = CELL_OK, .client = (char *) "fuzz", .code = (char *) "x = 1", .code_len = 5 };
        Journal *j = NULL;
        size_t n;
        bool incomplete;
        int r;

        fuzz_write(fuzz_path(1, "state/" JOURNAL_DIR "/fuzz.journal"), data, size);
        FUZZ_CHECK(journal_open(dirfd, "fuzz", FUZZ_MAX, &j) == 0);
        read_all(j);
        n = j->n;
        incomplete = j->incomplete;
        j = journal_free(j);

        FUZZ_CHECK(journal_open(dirfd, "fuzz", FUZZ_MAX, &j) == 0);
        FUZZ_CHECK(j->cut == 0 && j->n == n && j->incomplete == incomplete);
        r = journal_append(j, &cell);
        FUZZ_CHECK(incomplete ? r == -ESTALE : r == 0 || r == -EFBIG);
        if (r == 0)
                n++;
        j = journal_free(j);

        FUZZ_CHECK(journal_open(dirfd, "fuzz", FUZZ_MAX, &j) == 0);
        FUZZ_CHECK(j->cut == 0 && j->n == n);
        read_all(j);
        j = journal_free(j);
        return 0;
}

/* The cell journal: appends that survive a reopen, a torn or corrupt tail cut off, journal_max, the kernels it
 * rebuilds, rewrites, links and a full disk. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal.h"
#include "tap.h"
#include "util.h"

#define K1 "0f8fad5b-d9cb-469f-a165-70867728950e"
#define K2 "7d444840-9dc0-11d1-b245-5ffdce74fad2"

static char tmpdir[] = "/tmp/test-journal.XXXXXX";
static int dirfd_ = -1;

static int cell(Journal *j, const char *code, CellOutcome o) {
        JournalEntry e = { .at = 1764410000000000ULL,
                           .outcome = o,
                           .client = (char *) "client-1",
                           .code = (char *) code,
                           .code_len = strlen(code) };

        return journal_append(j, &e);
}

static char *read_code(Journal *j, size_t i) {
        JournalEntry e = {};
        char *code;

        if (journal_read(j, i, &e) < 0)
                return NULL;
        code = TAKE_PTR(e.code);
        journal_entry_done(&e);
        return code;
}

static char path_buf[128];
static const char *jpath(const char *name) {
        snprintf(path_buf, sizeof path_buf, "%s/journals/%s.journal", tmpdir, name);
        return path_buf;
}

static off_t file_size(const char *name) {
        struct stat st;

        return stat(jpath(name), &st) < 0 ? -1 : st.st_size;
}

static void test_roundtrip(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        JournalEntry e = {};
        char *code;

        is_int(journal_open(dirfd_, "a", JOURNAL_MAX_DEFAULT, &j), 0, "open a new journal");
        is_int(j->n, 0, "it is empty");
        is_int(cell(j, "x = 1", CELL_OK), 0, "append a cell");
        is_int(cell(j, "1/0", CELL_ERROR), 0, "append a failed cell");
        is_int(cell(j, "y = x + 1\n", CELL_OK), 0, "append another");
        is_int(journal_add_kernel(j, K1), 0, "record the kernel");
        j = journal_free(j);

        is_int(journal_open(dirfd_, "a", JOURNAL_MAX_DEFAULT, &j), 0, "reopen");
        is_int(j->n, 3, "three cells back");
        is_int(j->cut, 0, "nothing cut");
        ok(!j->incomplete, "complete");
        ok(journal_has_kernel(j, K1) && !journal_has_kernel(j, K2), "the kernel is back, and only it");
        ok(!journal_has_kernel(j, "0f8fad5b") && !journal_has_kernel(j, K1 "0"),
           "a shorter or longer id is no kernel");
        is_int(journal_read(j, 1, &e), 0, "read cell 1");
        is_str(e.code, "1/0", "its code");
        is_int(e.outcome, CELL_ERROR, "its outcome");
        is_str(e.client, "client-1", "its client");
        is_int(e.at, 1764410000000000ULL, "its time");
        journal_entry_done(&e);
        code = read_code(j, 2);
        is_str(code, "y = x + 1\n", "cell 2's code");
        free(code);
        is_int(journal_read(j, 3, &e), -ERANGE, "past the end: -ERANGE");
}

static void test_nul_and_long_client(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        char client[600];
        JournalEntry e = { .outcome = CELL_OK, .client = client, .code = (char *) "a\0b", .code_len = 3 }, back = {};

        memset(client, 'c', sizeof client - 1);
        client[sizeof client - 1] = '\0';
        is_int(journal_open(dirfd_, "nul", JOURNAL_MAX_DEFAULT, &j), 0, "open");
        is_int(journal_append(j, &e), 0, "a cell with a NUL byte and a 599-byte client");
        j = journal_free(j);
        is_int(journal_open(dirfd_, "nul", JOURNAL_MAX_DEFAULT, &j), 0, "reopen");
        is_int(journal_read(j, 0, &back), 0, "read it");
        is_int(back.code_len, 3, "all three bytes of code");
        ok(memcmp(back.code, "a\0b", 3) == 0, "the NUL kept");
        is_int(strlen(back.client), JOURNAL_CLIENT_MAX, "the client cut to JOURNAL_CLIENT_MAX");
        journal_entry_done(&back);
}

/* Each byte count of a torn last frame, and a flipped byte, leave the cells before it. */
static void test_torn_tail(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        off_t one, two, three;
        int cut_ok = 0, flip_ok = 0, tries = 0;

        is_int(journal_open(dirfd_, "torn", JOURNAL_MAX_DEFAULT, &j), 0, "open");
        cell(j, "a = 1", CELL_OK);
        one = file_size("torn");
        cell(j, "b = 2", CELL_OK);
        two = file_size("torn");
        cell(j, "c = 3", CELL_OK);
        three = file_size("torn");
        j = journal_free(j);

        for (off_t n = two; n < three; n++, tries++) {
                if (truncate(jpath("torn"), n) == 0 && journal_open(dirfd_, "torn", JOURNAL_MAX_DEFAULT, &j) == 0 &&
                    j->n == 2 && j->cut == (uint64_t) (n - two) && file_size("torn") == two)
                        cut_ok++;
                j = journal_free(j);
                /* Put the third cell back for the next length. */
                if (journal_open(dirfd_, "torn", JOURNAL_MAX_DEFAULT, &j) == 0)
                        cell(j, "c = 3", CELL_OK);
                j = journal_free(j);
        }
        is_int(cut_ok, tries, "every torn length of the last frame is cut off, the two before kept");

        /* A flipped byte in the second frame drops it and everything after it. */
        for (off_t at = one; at < two; at++) {
                int fd = open(jpath("torn"), O_RDWR | O_CLOEXEC);
                unsigned char b;

                if (fd < 0 || pread(fd, &b, 1, at) != 1)
                        break;
                b ^= 0x40;
                (void) !pwrite(fd, &b, 1, at);
                close(fd);
                if (journal_open(dirfd_, "torn", JOURNAL_MAX_DEFAULT, &j) == 0 && j->n == 1)
                        flip_ok++;
                j = journal_free(j);
                /* Rebuild the three cells. */
                unlink(jpath("torn"));
                if (journal_open(dirfd_, "torn", JOURNAL_MAX_DEFAULT, &j) == 0) {
                        cell(j, "a = 1", CELL_OK);
                        cell(j, "b = 2", CELL_OK);
                        cell(j, "c = 3", CELL_OK);
                }
                j = journal_free(j);
        }
        is_int(flip_ok, two - one, "a flipped byte anywhere in the second frame leaves only the first cell");
}

static void test_not_a_journal(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        int fd;

        fd = open(jpath("junk"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ok(fd >= 0 && write(fd, "{\"not\": \"a journal\"}\n", 21) == 21, "write junk");
        close(fd);
        is_int(journal_open(dirfd_, "junk", JOURNAL_MAX_DEFAULT, &j), 0, "a file with another header opens");
        is_int(j ? j->n : 99, 0, "as an empty journal");
        is_int(j ? j->cut : 0, 21, "all 21 bytes cut");
        is_int(file_size("junk"), 8, "the file is now just a header");
}

static void test_links_and_kinds(void) {
        Journal *j = NULL;
        char target[64];

        snprintf(target, sizeof target, "%s/target", tmpdir);
        close(open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        ok(symlink(target, jpath("link")) == 0, "journals/link.journal is a symlink");
        is_int(journal_open(dirfd_, "link", JOURNAL_MAX_DEFAULT, &j), -ELOOP, "a symlink is never followed");
        ok(mkfifo(jpath("fifo"), 0600) == 0, "journals/fifo.journal is a FIFO");
        is_int(journal_open(dirfd_, "fifo", JOURNAL_MAX_DEFAULT, &j), -EINVAL, "a FIFO is refused");
        ok(mkdirat(dirfd_, "journals/dir.journal", 0700) == 0, "journals/dir.journal is a directory");
        is_int(journal_open(dirfd_, "dir", JOURNAL_MAX_DEFAULT, &j), -EISDIR, "a directory is refused");
        is_int(journal_open(dirfd_, "../x", JOURNAL_MAX_DEFAULT, &j), -EINVAL, "an invalid name is refused");
        is_int(journal_open(dirfd_, "small", 100, &j), -EINVAL, "a max below 1 KiB is refused");
        ok(!j, "*ret untouched on failure");
}

static void test_links_dir(void) {
        char sub[64], elsewhere[64];
        _cleanup_close_ int fd = -1;
        Journal *j = NULL;

        snprintf(sub, sizeof sub, "%s/linked-state", tmpdir);
        snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", tmpdir);
        ok(mkdir(sub, 0700) == 0 && mkdir(elsewhere, 0700) == 0, "a state dir and another dir");
        snprintf(path_buf, sizeof path_buf, "%s/journals", sub);
        ok(symlink(elsewhere, path_buf) == 0, "its journals/ is a symlink");
        fd = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        is_int(journal_open(fd, "a", JOURNAL_MAX_DEFAULT, &j), -ENOTDIR, "journals/ as a symlink is never followed");
}

static void test_max(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        char big[600];
        int i, r = 0;

        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        is_int(journal_open(dirfd_, "max", 4096, &j), 0, "open with max 4 KiB");
        for (i = 0; i < 100 && (r = cell(j, big, CELL_OK)) == 0; i++)
                ;
        is_int(r, -EFBIG, "a cell past max: -EFBIG");
        is_int(i, (4096 - 8) / (8 + 12 + 8 + 599), "as many cells as fit");
        ok(j->incomplete, "the journal is incomplete");
        ok(file_size("max") <= 4096 + 9, "the file is max and the mark at most");
        is_int(cell(j, "a = 1", CELL_OK), -ESTALE, "a small cell after it is refused too");
        is_int(journal_add_kernel(j, K1), -ESTALE, "and a kernel");
        j = journal_free(j);
        is_int(journal_open(dirfd_, "max", 4096, &j), 0, "reopen");
        ok(j->incomplete, "still incomplete after a reopen");
        is_int(j->n, i, "with the cells that fit");
        is_int(journal_rewrite(j, 0, NULL), 0, "rewrite it empty");
        ok(!j->incomplete && j->n == 0, "complete and empty again");
        is_int(cell(j, "a = 1", CELL_OK), 0, "appends again");
}

static void test_rewrite(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        char *code;

        is_int(journal_open(dirfd_, "rw", JOURNAL_MAX_DEFAULT, &j), 0, "open");
        journal_add_kernel(j, K1);
        cell(j, "a = 1", CELL_OK);
        cell(j, "b = 2", CELL_OK);
        cell(j, "c = 3", CELL_OK);
        is_int(journal_rewrite(j, 2, K2), 0, "keep two cells and the new kernel");
        j = journal_free(j);
        is_int(journal_open(dirfd_, "rw", JOURNAL_MAX_DEFAULT, &j), 0, "reopen");
        is_int(j->n, 2, "two cells");
        code = read_code(j, 1);
        is_str(code, "b = 2", "the second kept");
        free(code);
        ok(journal_has_kernel(j, K2) && !journal_has_kernel(j, K1), "only the new kernel");
        is_int(faccessat(dirfd_, "journals/rw.journal.new", F_OK, 0), -1, "no temp file left");
        is_int(journal_rewrite(j, 0, NULL), 0, "rewrite empty");
        ok(j->n == 0 && j->n_kernels == 0, "no cells, no kernels");
        is_int(journal_remove(dirfd_, "rw"), 0, "remove");
        is_int(file_size("rw"), -1, "the file is gone");
        is_int(journal_remove(dirfd_, "rw"), 0, "removing a missing journal is success");
}

/* Cells put in among the kept ones, in the order they ran, and the kernels named again. */
static void test_rewrite_insert(void) {
        _cleanup_(journal_freep) Journal *j = NULL;
        JournalEntry extra[3] = {
                { .at = 1, .client = (char *) "other", .code = (char *) "x1", .code_len = 2 },
                { .at = 2, .client = (char *) "other", .code = (char *) "x2", .code_len = 2 },
                { .at = 3, .client = (char *) "other", .code = (char *) "x3", .code_len = 2 },
        };
        size_t at[3] = { 1, 1, 9 };
        const char *want[] = { "a", "x1", "x2", "b", "c", "x3" };
        bool same = true;

        is_int(journal_open(dirfd_, "ins", JOURNAL_MAX_DEFAULT, &j), 0, "open");
        journal_add_kernel(j, K1);
        cell(j, "a", CELL_OK);
        cell(j, "b", CELL_OK);
        cell(j, "c", CELL_ERROR);
        journal_add_kernel(j, K2);
        is_int(journal_rewrite_insert(j, 3, extra, at, 3), 0, "insert three cells among three");
        j = journal_free(j);
        is_int(journal_open(dirfd_, "ins", JOURNAL_MAX_DEFAULT, &j), 0, "reopen");
        is_int(j->n, 6, "six cells");
        for (size_t i = 0; i < 6 && i < j->n; i++) {
                _cleanup_free_ char *code = read_code(j, i);
                same = same && code && streq(code, want[i]);
        }
        ok(same, "a, x1, x2 (before b), b, c, x3 (after all)");
        ok(journal_has_kernel(j, K1) && journal_has_kernel(j, K2) && !j->incomplete, "both kernels named, complete");
        is_int(journal_rewrite_insert(j, 5, NULL, NULL, 0), 0, "take the last cell out");
        is_int(j->n, 5, "five cells");
        ok(journal_has_kernel(j, K1) && journal_has_kernel(j, K2), "still both kernels");
        at[0] = 7;
        is_int(journal_rewrite_insert(j, 2, extra, at, 1), 0, "keep two, then one cell after them");
        {
                _cleanup_free_ char *code = read_code(j, 2);
                ok(j->n == 3 && streq_ptr(code, "x1"), "the inserted cell after the two kept (%zu cells)", j->n);
        }
}

static int fill_disk(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        char buf[1024];

        if (fd < 0)
                return -errno;
        memset(buf, 'x', sizeof buf);
        for (;;)
                if (write(fd, buf, sizeof buf) < 0)
                        return errno == ENOSPC ? 0 : -errno;
}

static void test_full_disk(void) {
        char dir[] = "/tmp/test-journal-tmpfs.XXXXXX", big[8192];
        _cleanup_(journal_freep) Journal *j = NULL;
        _cleanup_close_ int fd = -1;
        int r = 0;

        if (geteuid() != 0 || !mkdtemp(dir)) {
                ok(1, "# SKIP full disk: not root, or no mkdtemp");
                return;
        }
        if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") < 0) {
                ok(1, "# SKIP full disk: cannot mount a tmpfs (%s)", strerror(errno));
                rmdir(dir);
                return;
        }
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        is_int(journal_open(fd, "full", JOURNAL_MAX_DEFAULT, &j), 0, "open on a small tmpfs");
        is_int(cell(j, "a = 1", CELL_OK), 0, "a cell");
        is_int(fill_disk(fd, "filler"), 0, "fill the tmpfs");
        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        for (int i = 0; i < 64 && (r = cell(j, big, CELL_OK)) == 0; i++)
                ;
        is_int(r, -ENOSPC, "an append on a full disk: -ENOSPC");
        ok(j->incomplete, "the journal is incomplete");
        j = journal_free(j);
        r = journal_open(fd, "full", JOURNAL_MAX_DEFAULT, &j);
        ok(r == 0 && (j->incomplete || j->n == 0), "reopened, it is incomplete or empty, never complete with a gap");
        j = journal_free(j);
        close(TAKE_FD(fd));
        ok(umount(dir) == 0, "umount the tmpfs");
        rmdir(dir);
}

static void test_crc(void) {
        is_int(journal_crc32("123456789", 9), 0xcbf43926u, "CRC-32 of the check string");
        is_str(cell_outcome_to_string(CELL_ABORTED), "aborted", "outcome names");
        ok(!cell_outcome_to_string(_CELL_OUTCOME_MAX), "out of range: NULL");
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f) {
        (void) st, (void) type, (void) f;
        return remove(p);
}

int main(void) {
        ok(mkdtemp(tmpdir) != NULL, "temp dir");
        dirfd_ = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok(dirfd_ >= 0 && mkdirat(dirfd_, "journals", 0700) == 0, "state dir with journals/");
        test_crc();
        test_roundtrip();
        test_nul_and_long_client();
        test_torn_tail();
        test_not_a_journal();
        test_links_and_kinds();
        test_links_dir();
        test_max();
        test_rewrite();
        test_rewrite_insert();
        test_full_disk();
        close(dirfd_);
        nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return tap_done();
}

/* The cell journal of a context with restore = replay: journals/NAME.journal under state_dir, one file per context,
 * appended to as its current kernel runs cells, so that a kernel lost without being asked can be rebuilt by
 * running them again (replay.h).
 *
 * The file is an 8-byte header and then frames, each
 *   u32 length of the payload, u32 CRC-32 of the payload (both little-endian), payload
 * and a payload is a kind byte and then, for a cell,
 *   u8 outcome, u16 client length, u64 realtime usec, client bytes, code bytes (the rest).
 * Every append is written in one write() and fdatasync'd before it returns, so a cell that was journaled survives a
 * daemon crash and a reboot. A frame that was being written when the machine went down (a torn tail), or anything
 * after a frame whose length or CRC is wrong, is cut off when the file is opened: what remains is a prefix of what
 * was appended.
 *
 * The file is bounded by journal_max. A cell that does not fit (or an append that fails, e.g. on a full disk) makes
 * the journal incomplete: a small mark frame records it (past journal_max by its few bytes), later appends are
 * refused, and the journal can no longer promise a rebuild, also after the daemon restarts. Only journal_rewrite()
 * makes it complete again.
 *
 * Besides cells, the file records kernel ids (frames of kind 'K'): the kernels whose namespace replaying all the
 * cells rebuilds. check --expect OLD can promise a rebuilt namespace only when OLD is among them.
 *
 * No loop, no kernel: the daemon calls these from its loop (the appends are small and the disk is the daemon's
 * own), and the unit test and the fuzz target call them on a scratch directory. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define JOURNAL_DIR "journals"
#define JOURNAL_MAX_DEFAULT (16ULL * 1024 * 1024)
/* The client name kept with a cell is cut to this many bytes. */
#define JOURNAL_CLIENT_MAX 255

typedef enum CellOutcome {
        CELL_OK,      /* execute_reply status "ok" */
        CELL_ERROR,   /* "error": it raised; never replayed */
        CELL_ABORTED, /* "aborted", or no reply before the kernel went: never replayed */
        _CELL_OUTCOME_MAX,
} CellOutcome;

const char *cell_outcome_to_string(CellOutcome o); /* "ok", "error", "aborted"; NULL out of range */

typedef struct JournalEntry {
        usec_t at; /* CLOCK_REALTIME when it was journaled */
        CellOutcome outcome;
        char *client; /* owned; the session of the execute_request, "" when unknown */
        char *code;   /* owned; code_len bytes and a NUL (a cell may hold a NUL byte) */
        size_t code_len;
} JournalEntry;

void journal_entry_done(JournalEntry *e); /* frees client and code, zeroes */

typedef struct Journal {
        int state_dirfd; /* borrowed: the caller keeps it open while the journal lives */
        int fd;          /* owned; open only within a call (-1 between calls), so a journal holds no descriptor */
        char *name;
        uint64_t max;
        uint64_t size;     /* bytes in the file */
        uint64_t *offsets; /* of each cell frame */
        size_t n, n_allocated;
        char (*kernels)[37]; /* the kernels whose namespace the cells rebuild (journal_add_kernel) */
        size_t n_kernels;
        bool incomplete; /* a cell was not journaled (too large for journal_max, or the disk failed) */
        uint64_t cut;    /* bytes cut off at open: a torn or corrupt tail */
        int last_error;  /* -errno of the last failed append, 0 when none */
} Journal;

/* Opens (creating it and journals/ 0700 as needed) the journal of context name under state_dirfd, checks every
 * frame and cuts off a torn or corrupt tail (j->cut says how much). A file that is not a journal (wrong header) is
 * treated as corrupt from its start: it is emptied. -EINVAL when context_name_valid(name) is false or max is below
 * 4 KiB; a symlink at journals/ or at the file is never followed (-ELOOP/-ENOTDIR); -EISDIR or -EINVAL for a file
 * that is not a regular file. *ret (owned by the caller, journal_free) is written only on success. state_dirfd is
 * borrowed and must stay open while the journal lives: no descriptor is held between calls (each call opens
 * journals/ and the file, and closes them), so 10,000 contexts with restore = replay cost no descriptors. A file
 * changed behind the journal's back between calls (its size is not what was written) is -ESTALE to an append. */
int journal_open(int state_dirfd, const char *name, uint64_t max, Journal **ret);
Journal *journal_free(Journal *j); /* NULL-safe, returns NULL */
static inline void journal_freep(Journal **j) {
        journal_free(*j);
}

/* Appends one cell (e->at, outcome, client, code; the client is cut to JOURNAL_CLIENT_MAX bytes) and fdatasyncs.
 * 0 on success. -EFBIG when the cell does not fit in max: the journal becomes incomplete. Another -errno when the
 * write failed (ENOSPC, EIO): the file is cut back to its last good frame and marked incomplete where that can still
 * be written, and removed where it cannot, so that a later open never finds a complete-looking journal with a cell
 * missing. -ESTALE when the journal is already incomplete (nothing is written). */
int journal_append(Journal *j, const JournalEntry *e);

/* Marks the journal incomplete (the daemon lost messages it would have journaled): as when a cell does not fit. */
void journal_set_incomplete(Journal *j);

/* Reads cell i (0-based, in append order) into *ret (the caller frees it with journal_entry_done). -ERANGE when i is
 * past the end; -EBADMSG when the frame changed under us since open. */
int journal_read(Journal *j, size_t i, JournalEntry *ret);

/* One cell of a page (journal_page()): e as read, its code cut to the room the page had left. */
typedef struct JournalPageCell {
        size_t index; /* 0-based */
        JournalEntry e;
        bool truncated; /* e.code was cut (e.code_len is then the length kept) */
} JournalPageCell;

/* A page of j for history: up to limit cells from offset (0-based), fewer once their code passes max_bytes; a
 * cell's code is cut to the room left, but to no less than 1 KiB, so that every page holds a cell and paging
 * always moves on. *ret (a new array of *ret_n cells; free with journal_page_free()) and *ret_next, the offset of
 * the next page or -1 when this one reaches the end (an offset past the end: no cells, -1). A read error: -errno,
 * nothing returned. */
int journal_page(Journal *j, size_t offset, size_t limit, size_t max_bytes, JournalPageCell **ret, size_t *ret_n,
                 long long *ret_next);
void journal_page_free(JournalPageCell *cells, size_t n);

/* Records that the namespace of kernel_id (36 characters) is what the journal's cells rebuild: the kernel that
 * the cells ran in, or one they were all replayed in. -ESTALE when the journal is incomplete, -EFBIG when it does
 * not fit (it becomes incomplete). */
int journal_add_kernel(Journal *j, const char *kernel_id);
/* Whether kernel_id was recorded since the journal was last rewritten. */
bool journal_has_kernel(const Journal *j, const char *kernel_id);

/* Replaces the file, atomically (temp + fsync + rename), with its first n cells and kernel_id (NULL: none) as the
 * only kernel: journal_rewrite(j, 0, NULL) empties it and makes it complete again (an explicit restart), and
 * journal_rewrite(j, k, NEW) keeps what a replay that stopped at cell k rebuilt. When that fails (-errno) the file is
 * removed, and the journal is incomplete: the old cells never rebuild a namespace they no longer describe. */
int journal_rewrite(Journal *j, size_t n, const char *kernel_id);

/* Rewrites the journal with its first n cells and, inserted among them, the n_extra cells extra (borrowed), extra[k]
 * before cell at[k] (at[k] >= n: after all of them; at must not decrease), keeping the kernels it names: the cells in
 * the order a kernel ran them, when some were journaled late (another client's cells during a replay), or one taken
 * out (n = j->n - 1). No kernel is named until every cell is written. -errno as journal_rewrite and journal_append
 * (the journal is then incomplete, or holds a prefix of those cells naming no kernel). */
int journal_rewrite_insert(Journal *j, size_t n, const JournalEntry *extra, const size_t *at, size_t n_extra);

/* Removes journals/NAME.journal (a missing file is success). */
int journal_remove(int state_dirfd, const char *name);

/* The CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes, for the frames. */
uint32_t journal_crc32(const void *p, size_t n);

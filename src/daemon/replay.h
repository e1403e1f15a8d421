/* Replaying a journal (journal.h) into the kernel that replaced one lost without being asked: which cells run, in
 * which order, where it stands and what to tell. Only cells that succeeded are run again, in the order they ran; the
 * first that now raises stops the replay there, and the context turns ready with what was rebuilt.
 *
 * Pure: the context sends the cells and feeds their outcomes in (context-replay.c); the unit test drives it alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "journal.h"

typedef enum ReplayPhase {
        REPLAY_NONE,      /* nothing to rebuild: the kernel started empty as asked, or restore = none */
        REPLAY_RUNNING,   /* the context is restoring */
        REPLAY_DONE,      /* every cell ran again: the namespace is rebuilt */
        REPLAY_FAILED,    /* a cell raised: stopped there */
        REPLAY_TIMED_OUT, /* restore_timeout passed: stopped at the cell it was running */
        REPLAY_LOST,      /* the kernel went during it */
        REPLAY_SKIPPED,   /* the journal was incomplete or unreadable: nothing was replayed */
        _REPLAY_PHASE_MAX,
} ReplayPhase;

/* "none", "running", "done", "failed", "timed-out", "lost", "skipped"; NULL out of range */
const char *replay_phase_to_string(ReplayPhase p);

typedef struct Replay {
        ReplayPhase phase;
        char from_kernel[37]; /* the lost kernel whose namespace is being rebuilt; "" when none */
        size_t *cells;        /* journal indices of the cells to run, in order; owned */
        size_t n_cells;
        size_t next;        /* cells[next] is running (or runs next) */
        size_t n_journaled; /* cells in the journal, the skipped failed ones included */
        char *error;        /* FAILED: "ename: evalue" of the cell; SKIPPED/LOST/TIMED_OUT: why; owned */
} Replay;

void replay_done(Replay *r); /* frees cells and error; the phase becomes REPLAY_NONE */

/* Plans the replay of n journaled cells with those outcomes, rebuilding from_kernel. incomplete (the journal lost a
 * cell) skips it all: a namespace that misses a cell is no rebuild, and the app is better told the kernel is empty.
 * Afterwards r->phase is RUNNING, or DONE when there is no cell to run, or SKIPPED. -ENOMEM. */
int replay_plan(Replay *r, const CellOutcome *outcomes, size_t n, bool incomplete, const char *from_kernel);
/* The journal index of the cell to run now; false when the replay is not running. */
bool replay_current(const Replay *r, size_t *ret_index);
/* The cell running now ended: ok, or it raised ename: evalue (either may be NULL). The replay goes on (RUNNING),
 * ends DONE, or stops FAILED. -ENOMEM (the replay then still stops, without the text). */
int replay_cell_ended(Replay *r, bool ok, const char *ename, const char *evalue);
/* Stops a running replay: TIMED_OUT or LOST, with why (copied; may be NULL). */
void replay_stop(Replay *r, ReplayPhase phase, const char *why);

/* How many of the journal's first cells the rebuilt namespace holds, for journal_rewrite: all after DONE, none
 * after SKIPPED, those before the cell that stopped it otherwise. */
size_t replay_kept(const Replay *r);
/* The cells that ran again. */
size_t replay_count(const Replay *r);

/* One line for status (newly allocated; NULL on out of memory or REPLAY_NONE), e.g.
 *   "replaying cell 3 of 5"
 *   "namespace rebuilt by replaying 5 cells (2 that raised skipped)"
 *   "replay stopped at cell 4 of 5 (journal entry 6): NameError: name 'x' is not defined; 3 cells rebuilt" */
char *replay_describe(const Replay *r);

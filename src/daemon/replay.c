/* Replaying a journal: see replay.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "util.h"

/* An error text in status is one line of at most this many bytes. */
#define REPLAY_ERROR_MAX 300

static const char *const phase_names[_REPLAY_PHASE_MAX] = {
        [REPLAY_NONE] = "none",       [REPLAY_RUNNING] = "running",     [REPLAY_DONE] = "done",
        [REPLAY_FAILED] = "failed",   [REPLAY_TIMED_OUT] = "timed-out", [REPLAY_LOST] = "lost",
        [REPLAY_SKIPPED] = "skipped",
};

const char *replay_phase_to_string(ReplayPhase p) {
        return p >= 0 && p < _REPLAY_PHASE_MAX ? phase_names[p] : NULL;
}

void replay_done(Replay *r) {
        free(r->cells);
        free(r->error);
        *r = (Replay){};
}

/* why, on one line and clipped, as r->error. */
static int replay_set_error(Replay *r, const char *why) {
        char *e;

        free(r->error);
        r->error = NULL;
        if (!why)
                return 0;
        e = strndup(why, REPLAY_ERROR_MAX);
        if (!e)
                return -ENOMEM;
        for (char *p = e; *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                        *p = ' ';
        r->error = e;
        return 0;
}

int replay_plan(Replay *r, const CellOutcome *outcomes, size_t n, bool incomplete, const char *from_kernel) {
        size_t *cells = NULL, k = 0;

        replay_done(r);
        snprintf(r->from_kernel, sizeof r->from_kernel, "%s", from_kernel ?: "");
        r->n_journaled = n;
        if (incomplete) {
                r->phase = REPLAY_SKIPPED;
                return replay_set_error(r, "the journal is incomplete (journal_max reached, or a write failed)");
        }
        if (n > 0) {
                cells = calloc(n, sizeof *cells);
                if (!cells)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                if (outcomes[i] == CELL_OK)
                        cells[k++] = i;
        r->cells = cells;
        r->n_cells = k;
        r->phase = k > 0 ? REPLAY_RUNNING : REPLAY_DONE;
        return 0;
}

bool replay_current(const Replay *r, size_t *ret_index) {
        if (r->phase != REPLAY_RUNNING || r->next >= r->n_cells)
                return false;
        *ret_index = r->cells[r->next];
        return true;
}

int replay_cell_ended(Replay *r, bool ok, const char *ename, const char *evalue) {
        _cleanup_free_ char *why = NULL;

        if (r->phase != REPLAY_RUNNING)
                return 0;
        if (ok) {
                if (++r->next == r->n_cells)
                        r->phase = REPLAY_DONE;
                return 0;
        }
        r->phase = REPLAY_FAILED;
        if (asprintf(&why, "%s%s%s", ename ?: "error", evalue && *evalue ? ": " : "", evalue ?: "") < 0) {
                why = NULL;
                return -ENOMEM;
        }
        return replay_set_error(r, why);
}

void replay_stop(Replay *r, ReplayPhase phase, const char *why) {
        if (r->phase != REPLAY_RUNNING)
                return;
        r->phase = phase;
        (void) replay_set_error(r, why);
}

size_t replay_kept(const Replay *r) {
        if (r->phase == REPLAY_SKIPPED)
                return 0;
        if (r->phase == REPLAY_DONE || r->phase == REPLAY_NONE)
                return r->n_journaled;
        return r->next < r->n_cells ? r->cells[r->next] : r->n_journaled;
}

size_t replay_count(const Replay *r) {
        return r->phase == REPLAY_DONE ? r->n_cells : r->next;
}

char *replay_describe(const Replay *r) {
        size_t skipped = r->n_journaled - r->n_cells;
        char *s = NULL, more[64] = "";
        int k = -1;

        if (skipped > 0)
                snprintf(more, sizeof more, " (%zu that raised skipped)", skipped);
        switch (r->phase) {
        case REPLAY_RUNNING:
                k = asprintf(&s, "replaying cell %zu of %zu", r->next + 1, r->n_cells);
                break;
        case REPLAY_DONE:
                k = asprintf(&s, "namespace rebuilt by replaying %zu cell%s%s", r->n_cells, r->n_cells == 1 ? "" : "s",
                             more);
                break;
        case REPLAY_FAILED:
        case REPLAY_TIMED_OUT:
        case REPLAY_LOST:
                k = asprintf(&s, "replay %s at journal cell %zu (%zu of %zu cells replayed): %s",
                             r->phase == REPLAY_FAILED ? "stopped"
                             : r->phase == REPLAY_LOST ? "lost its kernel"
                                                       : "timed out",
                             replay_kept(r) + 1, r->next, r->n_cells, r->error ?: "?");
                break;
        case REPLAY_SKIPPED:
                k = asprintf(&s, "nothing replayed: %s", r->error ?: "?");
                break;
        default:
                return NULL;
        }
        return k < 0 ? NULL : s;
}

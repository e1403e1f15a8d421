/* The replay plan: only cells that succeeded, in order; a cell that now raises stops it; what status says. */
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "tap.h"
#include "util.h"

#define OLD "0f8fad5b-d9cb-469f-a165-70867728950e"

static void test_plan(void) {
        const CellOutcome o[] = { CELL_OK, CELL_ERROR, CELL_OK, CELL_ABORTED, CELL_OK };
        _cleanup_(replay_done) Replay r = {};
        size_t at = 99, order[3], n = 0;
        char *s;

        is_int(replay_plan(&r, o, ELEMENTSOF(o), false, OLD), 0, "plan five journaled cells");
        is_int(r.phase, REPLAY_RUNNING, "running");
        is_str(r.from_kernel, OLD, "rebuilding the lost kernel");
        is_int(r.n_cells, 3, "three cells to run: those that raised or were aborted are skipped");
        s = replay_describe(&r);
        is_str(s, "replaying cell 1 of 3", "status while it runs");
        free(s);
        while (replay_current(&r, &at) && n < 3) {
                order[n++] = at;
                replay_cell_ended(&r, true, NULL, NULL);
        }
        is_int(n, 3, "three cells ran");
        ok(order[0] == 0 && order[1] == 2 && order[2] == 4, "cells 0, 2, 4, in journal order");
        is_int(r.phase, REPLAY_DONE, "done");
        ok(!replay_current(&r, &at), "nothing more to run");
        is_int(replay_count(&r), 3, "three cells replayed");
        is_int(replay_kept(&r), 5, "the whole journal describes the namespace");
        s = replay_describe(&r);
        is_str(s, "namespace rebuilt by replaying 3 cells (2 that raised skipped)", "status when done");
        free(s);
}

static void test_fails_halfway(void) {
        const CellOutcome o[] = { CELL_OK, CELL_OK, CELL_ERROR, CELL_OK, CELL_OK };
        _cleanup_(replay_done) Replay r = {};
        size_t at = 99;
        char *s;

        replay_plan(&r, o, ELEMENTSOF(o), false, OLD);
        replay_cell_ended(&r, true, NULL, NULL);
        replay_cell_ended(&r, true, NULL, NULL);
        ok(replay_current(&r, &at) && at == 3, "the third to run is journal cell 3");
        is_int(replay_cell_ended(&r, false, "NameError", "name 'x' is not defined\nmore"), 0, "it raises");
        is_int(r.phase, REPLAY_FAILED, "failed");
        ok(!replay_current(&r, &at), "the replay stops there");
        is_int(replay_count(&r), 2, "two cells replayed");
        is_int(replay_kept(&r), 3, "the journal keeps the cells before it");
        s = replay_describe(&r);
        is_str(s, "replay stopped at journal cell 4 (2 of 4 cells replayed): NameError: name 'x' is not defined more",
               "status names the cell and its error, on one line");
        free(s);
        replay_cell_ended(&r, true, NULL, NULL);
        is_int(r.phase, REPLAY_FAILED, "a late outcome changes nothing");
}

static void test_stop_and_skip(void) {
        const CellOutcome o[] = { CELL_OK, CELL_OK };
        _cleanup_(replay_done) Replay r = {};
        char *s, big[1000];

        replay_plan(&r, o, 2, false, OLD);
        replay_cell_ended(&r, true, NULL, NULL);
        replay_stop(&r, REPLAY_TIMED_OUT, "restore_timeout (1s) passed");
        is_int(r.phase, REPLAY_TIMED_OUT, "timed out");
        is_int(replay_kept(&r), 1, "keeps the cell that ran");
        s = replay_describe(&r);
        is_str(s, "replay timed out at journal cell 2 (1 of 2 cells replayed): restore_timeout (1s) passed",
               "status when it timed out");
        free(s);

        is_int(replay_plan(&r, o, 2, true, OLD), 0, "plan an incomplete journal");
        is_int(r.phase, REPLAY_SKIPPED, "skipped: no partial rebuild");
        is_int(replay_count(&r), 0, "nothing replayed");
        is_int(replay_kept(&r), 0, "and the new namespace holds none of the journal");
        s = replay_describe(&r);
        ok(s && strncmp(s, "nothing replayed: the journal is incomplete", 43) == 0, "status says why");
        free(s);

        is_int(replay_plan(&r, NULL, 0, false, OLD), 0, "plan an empty journal");
        is_int(r.phase, REPLAY_DONE, "done at once");
        s = replay_describe(&r);
        is_str(s, "namespace rebuilt by replaying 0 cells", "zero cells");
        free(s);

        replay_plan(&r, o, 2, false, OLD);
        memset(big, 'e', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        replay_cell_ended(&r, false, "E", big);
        ok(r.error && strlen(r.error) == 300, "an error text is clipped to 300 bytes");
        is_str(replay_phase_to_string(REPLAY_TIMED_OUT), "timed-out", "phase names");
        ok(!replay_phase_to_string(_REPLAY_PHASE_MAX), "out of range: NULL");
        replay_done(&r);
        ok(!replay_describe(&r), "no replay: no status line");
}

int main(void) {
        test_plan();
        test_fails_halfway();
        test_stop_and_skip();
        return tap_done();
}

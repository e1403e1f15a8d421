/* The pure restart policy: transition table, backoff with jitter, start limit. */
#include <stdint.h>

#include "policy.h"
#include "tap.h"

static void test_transitions(void) {
        /* Every running state can die into backoff/failed/stopped; a stopped one only starts. */
        ok(context_transition_allowed(CONTEXT_STOPPED, CONTEXT_STARTING), "stopped -> starting");
        ok(!context_transition_allowed(CONTEXT_STOPPED, CONTEXT_READY), "stopped -/-> ready");
        ok(!context_transition_allowed(CONTEXT_STOPPED, CONTEXT_BACKOFF), "stopped -/-> backoff");
        ok(context_transition_allowed(CONTEXT_STARTING, CONTEXT_READY), "starting -> ready");
        ok(context_transition_allowed(CONTEXT_STARTING, CONTEXT_BACKOFF), "starting -> backoff");
        ok(context_transition_allowed(CONTEXT_READY, CONTEXT_BUSY), "ready -> busy");
        ok(context_transition_allowed(CONTEXT_BUSY, CONTEXT_READY), "busy -> ready");
        ok(context_transition_allowed(CONTEXT_READY, CONTEXT_UNRESPONSIVE), "ready -> unresponsive");
        ok(context_transition_allowed(CONTEXT_UNRESPONSIVE, CONTEXT_READY), "unresponsive -> ready");
        ok(!context_transition_allowed(CONTEXT_BACKOFF, CONTEXT_READY), "backoff -/-> ready");
        ok(context_transition_allowed(CONTEXT_BACKOFF, CONTEXT_STARTING), "backoff -> starting");
        ok(context_transition_allowed(CONTEXT_FAILED, CONTEXT_STARTING), "failed -> starting (never stranded)");
        ok(!context_transition_allowed(CONTEXT_FAILED, CONTEXT_READY), "failed -/-> ready");
        ok(context_transition_allowed(CONTEXT_STOPPING, CONTEXT_STOPPED), "stopping -> stopped");
        ok(context_transition_allowed(CONTEXT_STOPPING, CONTEXT_STARTING), "stopping -> starting (restart)");
        ok(context_transition_allowed(CONTEXT_STOPPING, CONTEXT_BACKOFF),
           "stopping -> backoff (a client's shutdown_request, then the restart)");
        ok(!context_transition_allowed(CONTEXT_STOPPING, CONTEXT_READY), "stopping -/-> ready");
        ok(context_transition_allowed(CONTEXT_STARTING, CONTEXT_RESTORING), "starting -> restoring (a replay)");
        ok(context_transition_allowed(CONTEXT_RESTORING, CONTEXT_READY), "restoring -> ready");
        ok(context_transition_allowed(CONTEXT_RESTORING, CONTEXT_BACKOFF), "restoring -> backoff (died replaying)");
        ok(context_transition_allowed(CONTEXT_RESTORING, CONTEXT_STOPPING), "restoring -> stopping");
        ok(!context_transition_allowed(CONTEXT_READY, CONTEXT_RESTORING), "ready -/-> restoring");
        ok(!context_transition_allowed(CONTEXT_RESTORING, CONTEXT_BUSY), "restoring -/-> busy");
        is_str(context_state_to_string(CONTEXT_RESTORING), "restoring", "restoring's name");
        ok(!context_transition_allowed(_CONTEXT_STATE_MAX, CONTEXT_READY), "out of range refused");
        is_str(context_state_to_string(CONTEXT_UNRESPONSIVE), "unresponsive", "state name");
        is_str(context_state_to_string(_CONTEXT_STATE_MAX), "invalid", "bad state name");
}

static void test_backoff(void) {
        const usec_t min = 100 * USEC_PER_MSEC, max = 30 * USEC_PER_SEC;
        usec_t prev_hi = 0;

        /* With rnd = 0 the delay is the lower half; with rnd = max it stays below the full step. */
        is_int(backoff_delay(min, max, 0, 0), min / 2, "attempt 0, no jitter: half of 100 ms");
        ok(backoff_delay(min, max, 0, UINT32_MAX) < min, "attempt 0 stays below 100 ms");
        is_int(backoff_delay(min, max, 1, 0), min, "attempt 1 doubles");
        is_int(backoff_delay(min, max, 3, 0), 4 * min, "attempt 3: 800 ms step");
        for (unsigned a = 0; a < 40; a++) {
                usec_t lo = backoff_delay(min, max, a, 0);
                usec_t hi = backoff_delay(min, max, a, UINT32_MAX);
                if (!ok(lo <= hi && hi < max && lo >= prev_hi / 2, "attempt %u: %llu..%llu us within cap", a, lo, hi))
                        break;
                prev_hi = hi;
        }
        is_int(backoff_delay(min, max, 1000, 0), max / 2, "huge attempt count: capped, no overflow");
        is_int(backoff_delay(0, 0, 5, 12345), 0, "zero bounds give zero");
        /* Jitter spreads: different random inputs give different delays. */
        ok(backoff_delay(min, max, 4, 1) != backoff_delay(min, max, 4, 777777), "jitter varies with rnd");
}

static void test_start_limit(void) {
        const usec_t s = USEC_PER_SEC;
        StartLimit l = { 0 };

        /* 5 failures within 60 s trip it; the 5th is the one. */
        ok(!start_limit_hit(&l, 100 * s, 5, 60 * s), "1st failure");
        ok(!start_limit_hit(&l, 101 * s, 5, 60 * s), "2nd failure");
        ok(!start_limit_hit(&l, 102 * s, 5, 60 * s), "3rd failure");
        ok(!start_limit_hit(&l, 103 * s, 5, 60 * s), "4th failure");
        ok(start_limit_hit(&l, 104 * s, 5, 60 * s), "5th failure within 60 s trips the limit");

        start_limit_reset(&l);
        ok(!start_limit_hit(&l, 200 * s, 5, 60 * s), "after reset: counting again");

        /* Failures spread wider than the window, each after a start that reached ready, never trip it. */
        start_limit_reset(&l);
        for (int i = 0; i < 20; i++) {
                if (!ok(!start_limit_hit(&l, (usec_t) (1000 + 20 * i) * s, 5, 60 * s), "slow failure %d", i))
                        break;
                start_limit_ready(&l);
        }
        /* Slow failed starts in a row (a 30 s start_timeout each: never 5 within 60 s) trip it at the 5th. */
        start_limit_reset(&l);
        for (int i = 0; i < 4; i++)
                ok(!start_limit_hit(&l, (usec_t) (3000 + 31 * i) * s, 5, 60 * s), "slow failed start %d in a row",
                   i + 1);
        ok(start_limit_hit(&l, 3200 * s, 5, 60 * s), "the 5th failed start in a row trips it, 200 s after the 1st");
        start_limit_ready(&l);
        ok(!start_limit_hit(&l, 9000 * s, 5, 60 * s), "a start that reached ready starts the row over");
        /* burst 1: every failure is fatal. */
        start_limit_reset(&l);
        ok(start_limit_hit(&l, 5 * s, 1, 60 * s), "burst 1 trips at once");
        /* A burst larger than the ring is capped rather than never tripping. */
        start_limit_reset(&l);
        bool tripped = false;
        for (int i = 0; i < 200 && !tripped; i++)
                tripped = start_limit_hit(&l, (usec_t) i * USEC_PER_MSEC, 1000, 60 * s);
        ok(tripped, "burst above the ring size still trips");
}

int main(void) {
        test_transitions();
        test_backoff();
        test_start_limit();
        return tap_done();
}

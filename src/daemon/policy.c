#include <string.h>

#include "policy.h"

static const char *const state_names[_CONTEXT_STATE_MAX] = {
        [CONTEXT_STOPPED] = "stopped", [CONTEXT_STARTING] = "starting",         [CONTEXT_READY] = "ready",
        [CONTEXT_BUSY] = "busy",       [CONTEXT_UNRESPONSIVE] = "unresponsive", [CONTEXT_BACKOFF] = "backoff",
        [CONTEXT_FAILED] = "failed",   [CONTEXT_STOPPING] = "stopping",         [CONTEXT_RESTORING] = "restoring",
};

const char *context_state_to_string(ContextStateKind s) {
        return s >= 0 && s < _CONTEXT_STATE_MAX ? state_names[s] : "invalid";
}

#define S(x) (1u << CONTEXT_##x)
/* Which states each state may move to. A running kernel (starting, ready,
 * busy, unresponsive) can die at any time, so it can reach backoff, failed
 * and stopped (restart = no) directly. A kernel stopping because a client's
 * shutdown_request ended it is restarted after the backoff. */
static const unsigned transitions[_CONTEXT_STATE_MAX] = {
        [CONTEXT_STOPPED] = S(STARTING),
        [CONTEXT_STARTING] = S(READY) | S(RESTORING) | S(STOPPING) | S(BACKOFF) | S(FAILED) | S(STOPPED),
        [CONTEXT_RESTORING] = S(READY) | S(STOPPING) | S(BACKOFF) | S(FAILED) | S(STOPPED),
        [CONTEXT_READY] = S(BUSY) | S(UNRESPONSIVE) | S(STOPPING) | S(BACKOFF) | S(FAILED) | S(STOPPED),
        [CONTEXT_BUSY] = S(READY) | S(UNRESPONSIVE) | S(STOPPING) | S(BACKOFF) | S(FAILED) | S(STOPPED),
        [CONTEXT_UNRESPONSIVE] = S(READY) | S(BUSY) | S(STOPPING) | S(BACKOFF) | S(FAILED) | S(STOPPED),
        [CONTEXT_BACKOFF] = S(STARTING) | S(STOPPED),
        [CONTEXT_FAILED] = S(STARTING) | S(STOPPED),
        [CONTEXT_STOPPING] = S(STOPPED) | S(STARTING) | S(BACKOFF),
};
#undef S

bool context_transition_allowed(ContextStateKind from, ContextStateKind to) {
        if (from < 0 || from >= _CONTEXT_STATE_MAX || to < 0 || to >= _CONTEXT_STATE_MAX)
                return false;
        return transitions[from] & (1u << to);
}

usec_t backoff_delay(usec_t min, usec_t max, unsigned attempt, uint32_t rnd) {
        usec_t d = min;

        for (unsigned i = 0; i < attempt && d < max; i++)
                d = d > max / 2 ? max : d * 2;
        if (d > max)
                d = max;
        /* Equal jitter: [d/2, d). */
        return d / 2 + (d / 2 ? (usec_t) rnd % (d / 2) : 0);
}

bool start_limit_hit(StartLimit *l, usec_t now, unsigned burst, usec_t interval) {
        unsigned keep = 0;

        if (burst > ELEMENTSOF(l->times))
                burst = ELEMENTSOF(l->times);
        /* Drop the failures that fell out of the window, then add this one. */
        for (unsigned i = 0; i < l->n; i++)
                if (now - l->times[i] < interval)
                        l->times[keep++] = l->times[i];
        l->n = keep;
        if (l->n == ELEMENTSOF(l->times)) {
                memmove(l->times, l->times + 1, sizeof(l->times[0]) * (l->n - 1));
                l->n--;
        }
        l->times[l->n++] = now;
        l->in_row++;
        return l->n >= burst || l->in_row >= burst;
}

void start_limit_reset(StartLimit *l) {
        l->n = 0;
        l->in_row = 0;
}

void start_limit_ready(StartLimit *l) {
        l->in_row = 0;
}

/* The pure restart policy of a context: its states and the transitions
 * between them, the backoff delay, and the start limit. No I/O, no loop. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

typedef enum ContextStateKind {
        CONTEXT_STOPPED,
        CONTEXT_STARTING,
        CONTEXT_READY,
        CONTEXT_BUSY,
        CONTEXT_UNRESPONSIVE,
        CONTEXT_BACKOFF,
        CONTEXT_FAILED,
        CONTEXT_STOPPING,
        CONTEXT_RESTORING, /* restore = replay: the journal's cells run again in a kernel that replaced a lost one */
        _CONTEXT_STATE_MAX,
} ContextStateKind;

const char *context_state_to_string(ContextStateKind s);
bool context_transition_allowed(ContextStateKind from, ContextStateKind to);

/* The delay before restart number attempt (0-based count of consecutive
 * failures): min * 2^attempt capped at max, with "equal jitter" — half fixed,
 * half random from rnd — so a crowd of kernels does not restart in step. */
usec_t backoff_delay(usec_t min, usec_t max, unsigned attempt, uint32_t rnd);

/* The failed starts: record one at now and learn whether burst of them fell within interval, or came in a row
 * (no start that reached ready in between, whatever their times: a start that times out after 30 s cannot put 5
 * into a 60 s window, and must still end failed). */
typedef struct StartLimit {
        usec_t times[64];
        unsigned n;
        unsigned in_row; /* failed starts since the last one that reached ready */
} StartLimit;
bool start_limit_hit(StartLimit *l, usec_t now, unsigned burst, usec_t interval);
void start_limit_reset(StartLimit *l);
/* A start reached ready: the failed starts in a row start over (the window keeps its own). */
void start_limit_ready(StartLimit *l);

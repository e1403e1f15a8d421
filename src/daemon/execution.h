/* Executions: every cell the daemon accepts is one, with a random id, a state, and its outputs, each numbered in
 * the order the kernel sent them (seq from 0), kept after the cell ends so that a client that went away can read
 * them again (attach) from any number on. Reading an execution in pieces, each from the number after the last
 * one seen, gives exactly the outputs of one uninterrupted read.
 *
 * Pure: no loop, no kernel, no logging. Times are given by the caller (CLOCK_REALTIME). The store owns every
 * execution; the caller ties an execution to its cell (exec.h) and feeds it.
 *
 * Bounds. Per context, the last `keep` finished executions are kept, each until `ttl` after it ended; over the
 * store, the outputs kept (and the final results) take at most `memory` bytes (as execution_json_size counts
 * them): when more, the finished executions that ended first lose their outputs (the record stays, saying so). A
 * queued or running execution is never dropped and never loses outputs: its cell's output_limit bounds it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"
#include "reply.h"

typedef enum ExecutionState {
        EXECUTION_QUEUED,
        EXECUTION_RUNNING, /* sent to the kernel */
        EXECUTION_OK,
        EXECUTION_ERROR,
        EXECUTION_ABORTED,
        EXECUTION_TIMEOUT,
        EXECUTION_INTERRUPTED, /* by cancel, or because its client went away (on_disconnect = interrupt) */
        EXECUTION_NOT_STARTED,
        EXECUTION_LOST, /* its kernel died or was replaced while it ran */
        _EXECUTION_STATE_MAX,
} ExecutionState;

/* "queued", "running", "ok", "error", "aborted", "timeout", "interrupted", "not_started", "lost"; NULL out of
 * range. */
const char *execution_state_to_string(ExecutionState s);

typedef struct ExecutionStore ExecutionStore;
typedef struct Execution Execution;
typedef struct ExecutionWatch ExecutionWatch;

/* A reader that follows an execution. Both callbacks are called from execution_output and execution_end only. */
typedef struct ExecutionWatcher {
        /* Each new output (borrowed for the call), with its number. */
        void (*on_output)(void *userdata, Execution *e, uint64_t seq, const json_t *output);
        /* The execution ended (its result is set). The watch is freed after it returns: do not unwatch it. */
        void (*on_end)(void *userdata, Execution *e);
} ExecutionWatcher;

/* memory: the bound on kept outputs, in bytes (0: none are kept after their execution ends). */
int execution_store_new(size_t memory, ExecutionStore **ret);
/* Frees every execution; their watchers are freed without a call. NULL-safe. */
void execution_store_free(ExecutionStore *s);
/* A new bound (reload): applied at once. */
void execution_store_set_memory(ExecutionStore *s, size_t memory);
/* Bytes of outputs and results kept now, over the store. */
size_t execution_store_bytes(const ExecutionStore *s);
/* Forgets the finished executions whose ttl passed at now. */
void execution_store_expire(ExecutionStore *s, usec_t now);
/* The execution with id, or NULL. */
Execution *execution_find(ExecutionStore *s, const char *id);
/* Every execution, oldest submitted first: *ret_n of them in a new array (the caller frees the array, not the
 * executions, which stay valid until the store changes). -ENOMEM. */
int execution_store_list(ExecutionStore *s, Execution ***ret, size_t *ret_n);

/* A new queued execution of context (copied), whose kernel runs as uid (who may see it, with root and the daemon's
 * uid), submitted at now, with a random id. keep (at least 1 counts) and ttl bound it once it ended. */
int execution_new(ExecutionStore *s, const char *context, uid_t uid, unsigned keep, usec_t ttl, usec_t now,
                  Execution **ret);

/* Forgets e, which no watcher follows (a cell that could not be queued). */
void execution_discard(Execution *e);
/* What e's outputs and result cost now (execution_json_size). */
size_t execution_bytes(const Execution *e);

/* The cell went to the kernel kernel_id (copied; may be NULL). */
int execution_start(Execution *e, const char *kernel_id, usec_t now);
/* The next output (deep-copied): it gets the next number, is kept, and goes to every watcher. -EINVAL after the
 * end, -ENOMEM. */
int execution_output(Execution *e, const json_t *output);
/* The end: state (a final one), the execution count (-1: unknown), the kernel (copied; NULL: leave as it was),
 * and the answer an execute request gets (stolen): result is its body, is_error says it comes as an error (with
 * message, copied). Every watcher's on_end is called, then the bounds are applied (e itself may lose its outputs,
 * never the record, before the function returns). -EINVAL when it ended already or state is not final (result
 * is freed then); out of memory loses kernel_id or message, never the end. */
int execution_end(Execution *e, ExecutionState state, long long execution_count, const char *kernel_id, json_t *result,
                  bool is_error, const char *message, usec_t now);

/* Follows e (which has not ended: -EINVAL else) until it ends or execution_unwatch. *ret is valid until then. */
int execution_watch(Execution *e, const ExecutionWatcher *watcher, void *userdata, ExecutionWatch **ret);
void execution_unwatch(ExecutionWatch *w);

const char *execution_id(const Execution *e);
const char *execution_context(const Execution *e);
uid_t execution_uid(const Execution *e);
ExecutionState execution_state(const Execution *e);
bool execution_ended(const Execution *e);
/* How many outputs it had: the next one is numbered so. */
uint64_t execution_n_outputs(const Execution *e);
/* Whether its outputs were dropped (the memory bound): then none of them is kept. */
bool execution_outputs_dropped(const Execution *e);
/* Output seq (borrowed), or NULL when there is none such or it was dropped. */
const json_t *execution_get_output(const Execution *e, uint64_t seq);
/* The answer of an ended execution (borrowed; its outputs emptied when they were dropped); NULL before the end. */
const json_t *execution_result(const Execution *e, bool *ret_is_error, const char **ret_message);

/* What the caller ties to e (its cell); NULL at first. */
void execution_set_owner(Execution *e, void *owner);
void *execution_owner(const Execution *e);

/* The record as the protocol tells it (reply.h); *ret borrows from e. */
void execution_reply(const Execution *e, ReplyExecution *ret);

/* What a JSON value costs in memory, roughly: its strings' bytes and a fixed overhead per value. */
size_t execution_json_size(const json_t *j);

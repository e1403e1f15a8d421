/* What the parts of the control methods share (handlers.c, handlers-access.c, handlers-add.c, handlers-cells.c).
 * Private to src/daemon/handlers*.c. */
#pragma once

#include <jansson.h>

#include "context.h"
#include "execution.h"
#include "control.h"
#include "handlers.h"

#define N_METHODS 17 /* the rows of methods[] */

struct Handlers {
        HandlersHost host;
        ExecutionStore *executions;
        struct Waiter *waiters;           /* control requests waiting for a state */
        ControlMethod control[N_METHODS]; /* the table as the control server takes it: every row dispatched here */
};

/* handlers-access.c */
/* The context of that name, whoever may see it; NULL when there is none. */
Context *handlers_find(Handlers *h, const char *name);
/* Root and the daemon's own uid: they see every context and the daemon-wide metrics. */
bool handlers_peer_privileged(const ControlPeer *peer);
/* The context named in params, answering the request with an error (and NULL) when there is none, the peer may not
 * see it, or the daemon is shutting down. */
Context *handlers_request_context(Handlers *h, ControlRequest *req, json_t *params);

/* handlers-add.c */
/* contexts_dir, opened without following a symlink (created when missing): a descriptor, or -errno. */
int handlers_open_contexts_dir(Handlers *h);
/* add, a row of the table in handlers.c. */
void method_add(ControlRequest *req, json_t *params, void *userdata);
/* Whether the peer of req may remove c, which it sees: root and the daemon's uid any, another uid those it
 * added. Answers req with permission denied when not. */
bool handlers_peer_may_remove(ControlRequest *req, const Context *c);
/* What req's peer is told of the reload its add or remove of name made: root and the daemon's uid the whole
 * report (returned as it is); another uid a report of its own context alone (report is freed), since the whole
 * one names and counts every context that changed. NULL on out of memory. */
json_t *handlers_report_for(ControlRequest *req, json_t *report, const char *name, bool added);
/* The error of that reload as req's peer may see it: another uid sees one in the file at path, its context's,
 * and otherwise only that the configuration does not load (root's files may name other uids' contexts). */
const char *handlers_reload_error_for(ControlRequest *req, const char *path, const char *error);

/* The methods of cells (handlers-cells.c), rows of the table in handlers.c. */
void method_execute(ControlRequest *req, json_t *params, void *userdata);
void method_history(ControlRequest *req, json_t *params, void *userdata);
void method_interrupt(ControlRequest *req, json_t *params, void *userdata);

/* The executions of the daemon (handlers-access.c): every cell execute accepted. */
ExecutionStore *handlers_executions(Handlers *h);
/* Whether peer may see what runs as uid: root, the daemon's uid, and uid itself. */
bool handlers_peer_sees_uid(const ControlPeer *peer, uid_t uid);

/* The cell of e, which has not ended (handlers-cells.c). withdraw takes it back from the queue (exec_cell_cancel:
 * dropped, withdrawn, or interrupted with its reply discarded) and ends e as state (EXECUTION_INTERRUPTED or
 * EXECUTION_NOT_STARTED) with why; interrupt interrupts it when the kernel runs it (exec_cell_interrupt), its end
 * then coming as the kernel answers (EXECUTION_INTERRUPTED), and says whether it did. */
void handlers_cell_withdraw(Execution *e, ExecutionState state, const char *why);
bool handlers_cell_interrupt(Execution *e);

/* Streams e to req (handlers-cells.c): the "execution" notification (the record), each kept output from
 * from on, each new one as it comes, then the answer execute gives. With interrupt_on_leave, a peer that goes
 * away before the end withdraws the cell (on_disconnect = interrupt); else the cell runs on. */
void handlers_follow(ControlRequest *req, Execution *e, uint64_t from, bool interrupt_on_leave);

/* The methods of executions (handlers-executions.c), rows of the table in handlers.c. */
void method_attach(ControlRequest *req, json_t *params, void *userdata);
void method_executions(ControlRequest *req, json_t *params, void *userdata);
void method_cancel(ControlRequest *req, json_t *params, void *userdata);

/* The control methods of executions (execution.h): a request following one (execute's own stream, attach), and
 * attach, executions and cancel. See handlers-private.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "execution.h"
#include "handlers-private.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

/* A control request that reads an execution until it ends. */
typedef struct Follower {
        ControlRequest *req;
        Execution *e;
        ExecutionWatch *watch;
        bool interrupt_on_leave; /* execute with on_disconnect = interrupt */
} Follower;

static void notify_output(ControlRequest *req, uint64_t seq, const json_t *output) {
        ReplyOutput r = { .seq = (long long) seq, .output = output };
        json_t *params = NULL;

        /* A peer that stopped reading loses its stream, not the cell: its reply still comes. */
        if (reply_output_encode(&r, &params) >= 0)
                (void) control_request_notify(req, "output", params);
}

/* Answers req as execute answers: the result, or an error whose data is the result. */
static void answer_end(ControlRequest *req, const Execution *e) {
        bool is_error;
        const char *message;
        const json_t *result = execution_result(e, &is_error, &message);
        json_t *body = result ? json_deep_copy(result) : NULL;

        if (!body)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        if (is_error)
                return control_request_error(req, KS_ERR_FAILED, body, "%s",
                                             message ?: "the cell did not run to its end");
        control_request_reply(req, body);
}

static void follower_on_output(void *userdata, Execution *e, uint64_t seq, const json_t *output) {
        Follower *f = userdata;

        (void) e;
        notify_output(f->req, seq, output);
}

static void follower_on_end(void *userdata, Execution *e) {
        Follower *f = userdata;

        control_request_set_cancel(f->req, NULL, NULL);
        answer_end(f->req, e);
        free(f);
}

static const ExecutionWatcher follower_watcher = {
        .on_output = follower_on_output,
        .on_end = follower_on_end,
};

/* The peer went away: the execution runs on, but for execute's own request with on_disconnect = interrupt. */
static void follower_cancel(ControlRequest *req, void *data) {
        Follower *f = data;
        Execution *e = f->e;
        bool interrupt = f->interrupt_on_leave;

        (void) req;
        execution_unwatch(f->watch);
        free(f);
        /* A cell the kernel was sent is interrupted (withdrawn, should it not have started it yet). */
        if (interrupt)
                handlers_cell_withdraw(
                        e, execution_state(e) == EXECUTION_RUNNING ? EXECUTION_INTERRUPTED : EXECUTION_NOT_STARTED,
                        "the cell was interrupted: its client went away");
}

static void notify_record(ControlRequest *req, const Execution *e) {
        ReplyExecution r;
        json_t *j = NULL;

        execution_reply(e, &r);
        if (reply_execution_encode(&r, &j) >= 0)
                (void) control_request_notify(req, "execution", j);
}

void handlers_follow(ControlRequest *req, Execution *e, uint64_t from, bool interrupt_on_leave) {
        size_t kept = execution_bytes(e);
        Follower *f;

        /* What is kept (the outputs replayed and the reply's merged outputs) may take twice its size as JSON
         * (newlines, quotes): at most 4 * output_limit, as for execute's own cell. What the cell prints from now on
         * rides on the connection's fixed allowance (control.h): an attach that reads too slowly is disconnected
         * then, and may attach again from where it was. */
        control_request_allow_queue(req, kept > SIZE_MAX / 2 ? SIZE_MAX : 2 * kept);
        notify_record(req, e);
        for (uint64_t seq = from; seq < execution_n_outputs(e); seq++)
                notify_output(req, seq, execution_get_output(e, seq));
        if (execution_ended(e))
                return answer_end(req, e);
        f = calloc(1, sizeof *f);
        if (!f || execution_watch(e, &follower_watcher, f, &f->watch) < 0) {
                free(f);
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        }
        f->req = req;
        f->e = e;
        f->interrupt_on_leave = interrupt_on_leave;
        control_request_set_cancel(req, follower_cancel, f);
}

/* The execution params.id names, when the peer may see it; else the request is answered (and NULL): an execution
 * the peer may not see answers as a missing one, so that ids of others' cells cannot be probed. */
static Execution *request_execution(Handlers *h, ControlRequest *req, json_t *params) {
        json_t *v = json_object_get(params, "id");
        const char *id = json_string_value(v);
        Execution *e;

        if (!id) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.id must be a string");
                return NULL;
        }
        execution_store_expire(handlers_executions(h), now_usec(CLOCK_REALTIME));
        e = execution_find(handlers_executions(h), id);
        if (!e || !handlers_peer_sees_uid(control_request_peer(req), execution_uid(e))) {
                /* The id is the peer's text: only as much of it as makes a UUID goes back. */
                control_request_error(req, KS_ERR_NO_EXECUTION, NULL, "no such execution: %.36s", id);
                return NULL;
        }
        return e;
}

void method_attach(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        json_t *from_v = json_object_get(params, "from");
        uint64_t from = 0;
        Execution *e;

        if (from_v && (!json_is_integer(from_v) || json_integer_value(from_v) < 0))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "params.from must be an integer, 0 or more");
        if (from_v)
                from = (uint64_t) json_integer_value(from_v);
        e = request_execution(h, req, params);
        if (!e)
                return;
        if (execution_outputs_dropped(e) && from < execution_n_outputs(e))
                return control_request_error(req, KS_ERR_FAILED, NULL,
                                             "the outputs of execution %s are no longer kept (executions_memory "
                                             "dropped them after it ended)",
                                             execution_id(e));
        handlers_follow(req, e, from, false);
}

void method_executions(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        json_t *ctx_v = json_object_get(params, "context");
        const char *ctx = json_string_value(ctx_v);
        const ControlPeer *peer = control_request_peer(req);
        _cleanup_free_ Execution **all = NULL;
        _cleanup_free_ ReplyExecution *list = NULL;
        ReplyExecutions r = {};
        size_t n_all = 0;
        json_t *j = NULL;

        if (ctx_v && !ctx)
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.context must be a string");
        execution_store_expire(handlers_executions(h), now_usec(CLOCK_REALTIME));
        if (execution_store_list(handlers_executions(h), &all, &n_all) < 0 ||
            !(list = calloc(n_all + 1, sizeof *list)))
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        for (size_t i = 0; i < n_all; i++)
                if (handlers_peer_sees_uid(peer, execution_uid(all[i])) &&
                    (!ctx || streq(ctx, execution_context(all[i]))))
                        execution_reply(all[i], &list[r.n_executions++]);
        r.executions = list;
        if (reply_executions_encode(&r, &j) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        /* A record is some 400 bytes of JSON; the daemon keeps a bounded number of them per context. */
        control_request_allow_queue(req, 512 * (n_all + 1));
        control_request_reply(req, j);
}

void method_cancel(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Execution *e = request_execution(h, req, params);
        char why[96];
        ReplyExecution r;
        json_t *j = NULL;
        unsigned uid;

        if (!e)
                return; /* answered: req is gone */
        uid = (unsigned) control_request_peer(req)->uid;
        if (execution_ended(e))
                return control_request_error(req, KS_ERR_FAILED, NULL, "execution %s has ended already (%s)",
                                             execution_id(e), execution_state_to_string(execution_state(e)));
        /* A cell the kernel runs is interrupted (its end comes as the kernel answers); one it has not started
         * is withdrawn, and will not run. */
        if (!handlers_cell_interrupt(e)) {
                snprintf(why, sizeof why, "the cell was cancelled by uid %u before it started", uid);
                handlers_cell_withdraw(e, EXECUTION_NOT_STARTED, why);
        }
        log_info("%s: execution %s cancelled by uid %u", execution_context(e), execution_id(e), uid);
        execution_reply(e, &r);
        (void) reply_execution_encode(&r, &j);
        control_request_reply(req, j);
}

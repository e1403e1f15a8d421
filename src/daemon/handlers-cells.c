/* The control methods of cells: execute (the cell becomes an execution, execution.h, whose outputs are streamed
 * and whose result is answered; or, detached, left to run), history (a page of the cell journal), interrupt; and a
 * request following an execution (execute's own stream, attach's). See
 * handlers-private.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "execution.h"
#include "handlers-private.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

/* history's page: cells per request, by default and at most. */
#define HISTORY_LIMIT_DEFAULT 100
#define HISTORY_LIMIT_MAX 1000

/* One accepted cell between its submit and its answer: its execution (execution.h) and its cell in the queue. The
 * execution is the sink of the cell; the requests that read it (execute's own, attach) follow the execution. */
typedef struct CellRun {
        Execution *e;
        ExecCell *cell;
        bool cancelled; /* cancel interrupted it: an error then says interrupted */
} CellRun;

static void run_on_start(void *userdata, const char *kernel_id) {
        CellRun *run = userdata;

        (void) execution_start(run->e, kernel_id, now_usec(CLOCK_REALTIME));
}

static void run_on_output(void *userdata, const json_t *output) {
        CellRun *run = userdata;

        /* Out of memory loses this output of the record; the cell goes on. */
        (void) execution_output(run->e, output);
}

static ExecutionState state_of(ExecStatus status, bool cancelled) {
        switch (status) {
        case EXEC_OK:
                return EXECUTION_OK;
        case EXEC_ERROR:
                return cancelled ? EXECUTION_INTERRUPTED : EXECUTION_ERROR;
        case EXEC_TIMEOUT:
                return EXECUTION_TIMEOUT;
        case EXEC_DIED:
                return EXECUTION_LOST;
        case EXEC_NOT_STARTED:
                return EXECUTION_NOT_STARTED;
        case EXEC_KERNEL_ABORTED:
                return cancelled ? EXECUTION_INTERRUPTED : EXECUTION_ABORTED;
        default:
                return EXECUTION_ABORTED;
        }
}

static void run_on_done(void *userdata, const ExecResult *res) {
        CellRun *run = userdata;
        ReplyExecResult r;
        json_t *body = NULL;
        bool is_error = res->status == EXEC_DIED || res->status == EXEC_ABORTED;

        exec_result_reply(res, &r);
        (void) reply_exec_result_encode(&r, &body);
        (void) execution_end(run->e, state_of(res->status, run->cancelled), res->execution_count, res->kernel_id, body,
                             is_error, is_error ? res->message ?: "the cell did not run to its end" : NULL,
                             now_usec(CLOCK_REALTIME));
        free(run);
}

static const ExecSink run_sink = {
        .on_output = run_on_output,
        .on_start = run_on_start,
        .on_done = run_on_done,
};

void handlers_cell_withdraw(Execution *e, ExecutionState state, const char *why) {
        CellRun *run = execution_owner(e);
        bool started = state != EXECUTION_NOT_STARTED;
        ReplyExecResult r = {
                .status = started ? "aborted" : "not_started",
                .execution_count = -1,
                .message = why,
        };
        json_t *body = NULL;

        if (!run)
                return;
        exec_cell_cancel(run->cell);
        free(run);
        execution_set_owner(e, NULL);
        (void) reply_exec_result_encode(&r, &body);
        (void) execution_end(e, state, -1, NULL, body, started, why, now_usec(CLOCK_REALTIME));
}

bool handlers_cell_interrupt(Execution *e) {
        CellRun *run = execution_owner(e);

        if (!run || !exec_cell_interrupt(run->cell))
                return false;
        run->cancelled = true;
        return true;
}

/* params.on_disconnect: "interrupt" (default) or "keep"; -1 when neither (answered). */
static int on_disconnect_param(ControlRequest *req, json_t *params, bool *ret_keep) {
        json_t *v = json_object_get(params, "on_disconnect");
        const char *s = json_string_value(v);

        if (!v || (s && streq(s, "interrupt")))
                *ret_keep = false;
        else if (s && streq(s, "keep"))
                *ret_keep = true;
        else {
                control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                      "params.on_disconnect must be \"interrupt\" or \"keep\"");
                return -1;
        }
        return 0;
}

void method_execute(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        const char *code = json_string_value(json_object_get(params, "code"));
        json_t *timeout = json_object_get(params, "timeout"), *detach_v = json_object_get(params, "detach");
        json_t *kill_after = json_object_get(params, "kill_after");
        usec_t timeout_usec = USEC_INFINITY, kill_after_usec = 0;
        const ContextConfig *cc;
        ContextStateKind st;
        bool keep, detach = json_is_true(detach_v);
        CellRun *run;
        Execution *e;
        int r;

        if (!c)
                return;
        if (!code)
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.code must be a string");
        /* A cell's timeout is not clamped: a longer one than asked would surprise. */
        if (timeout && (!json_is_number(timeout) ||
                        protocol_timeout_usec(json_number_value(timeout), PROTOCOL_MAX_TIMEOUT_SEC * USEC_PER_SEC,
                                              &timeout_usec) != 0))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "params.timeout must be a number of seconds greater than 0 and at most "
                                             "%d",
                                             PROTOCOL_MAX_TIMEOUT_SEC);
        if (kill_after && (!json_is_number(kill_after) ||
                           protocol_timeout_usec(json_number_value(kill_after),
                                                 PROTOCOL_MAX_TIMEOUT_SEC * USEC_PER_SEC, &kill_after_usec) != 0))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "params.kill_after must be a number of seconds greater than 0 and at "
                                             "most %d",
                                             PROTOCOL_MAX_TIMEOUT_SEC);
        if (detach_v && !json_is_boolean(detach_v))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.detach must be a boolean");
        if (on_disconnect_param(req, params, &keep) < 0)
                return;
        st = context_state(c);
        if (st == CONTEXT_STOPPED || st == CONTEXT_FAILED || (st == CONTEXT_STOPPING && !context_comes_back(c)))
                return control_request_error(req, KS_ERR_FAILED, NULL, "context %s is not running (state %s%s%s)",
                                             context_name(c), context_state_to_string(st),
                                             context_last_error(c) ? ": " : "", context_last_error(c) ?: "");
        cc = context_config(c);
        execution_store_expire(handlers_executions(h), now_usec(CLOCK_REALTIME));
        run = calloc(1, sizeof *run);
        if (!run || execution_new(handlers_executions(h), context_name(c), context_uid(c), cc->executions_keep,
                                  cc->executions_ttl, now_usec(CLOCK_REALTIME), &run->e) < 0) {
                free(run);
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        }
        e = run->e;
        execution_set_owner(e, run);
        ExecOptions opt = {
                .timeout = timeout_usec,
                .output_limit = cc->output_limit,
                .kill_after = kill_after_usec,
        };
        r = exec_queue_submit(context_exec(c), code, &opt, &run_sink, run, &run->cell);
        if (r < 0) {
                execution_discard(e);
                free(run);
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot send the cell to the kernel: %s",
                                             strerror(-r));
        }
        log_debug("%s: execution %s submitted by uid %u%s", context_name(c), execution_id(e),
                  (unsigned) control_request_peer(req)->uid,
                  detach ? ", detached"
                  : keep ? ", kept"
                         : "");
        if (detach) {
                ReplyExecution rec;
                json_t *j = NULL;

                execution_reply(e, &rec);
                (void) reply_execution_encode(&rec, &j);
                return control_request_reply(req, j);
        }
        /* Its streamed outputs and its reply each hold up to output_limit
         * bytes of text, which JSON may double (newlines, quotes). */
        control_request_allow_queue(req, opt.output_limit > SIZE_MAX / 4 ? SIZE_MAX : 4 * opt.output_limit);
        handlers_follow(req, e, 0, !keep);
}

/* history: a page of the context's cell journal (restore = replay). */
void method_history(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        _cleanup_free_ char *why = NULL;
        size_t offset, limit;
        json_t *j = NULL;
        int r;

        if (!c)
                return;
        r = protocol_history_params(params, HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, &offset, &limit, &why);
        if (r < 0)
                return control_request_error(req, r == -ENOMEM ? RPC_INTERNAL_ERROR : RPC_INVALID_PARAMS, NULL, "%s",
                                             why ?: "out of memory");
        r = context_history(c, offset, limit, &j);
        if (r == -ENODATA)
                return control_request_error(req, KS_ERR_FAILED, NULL,
                                             "context %s keeps no cell journal (restore = none)", context_name(c));
        if (r < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot read the cell journal of %s: %s",
                                             context_name(c), strerror(-r));
        /* A page holds up to HISTORY_PAGE_BYTES of code, which JSON may make six times longer. */
        control_request_allow_queue(req, 6 * HISTORY_PAGE_BYTES + 65536);
        control_request_reply(req, j);
}

void method_interrupt(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        bool any;

        if (!c)
                return;
        any = exec_queue_interrupt(context_exec(c));
        if (any)
                log_info("%s: cell interrupted by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        ReplyInterrupt r = { .interrupted = any };
        json_t *j = NULL;

        (void) reply_interrupt_encode(&r, &j);
        control_request_reply(req, j);
}

/* ---- A request following an execution ---- */

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

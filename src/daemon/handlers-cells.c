/* The control methods of cells: execute (a cell's outputs streamed, its result answered), history (a page of the
 * cell journal), interrupt. See handlers-private.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "handlers-private.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

/* history's page: cells per request, by default and at most. */
#define HISTORY_LIMIT_DEFAULT 100
#define HISTORY_LIMIT_MAX 1000

/* One cell in flight for a control request. */
typedef struct CellRequest {
        ControlRequest *req;
        ExecCell *cell;
} CellRequest;

static void cell_on_output(void *userdata, const json_t *output) {
        CellRequest *cr = userdata;
        ReplyOutput r = { .output = output };
        json_t *params = NULL;

        /* A peer that stopped reading loses its stream, not the cell: its reply still comes. */
        if (reply_output_encode(&r, &params) >= 0)
                (void) control_request_notify(cr->req, "output", params);
}

static void cell_on_done(void *userdata, const ExecResult *res) {
        CellRequest *cr = userdata;
        ReplyExecResult r;
        json_t *body = NULL;

        exec_result_reply(res, &r);
        (void) reply_exec_result_encode(&r, &body);

        control_request_set_cancel(cr->req, NULL, NULL);
        if (res->status == EXEC_DIED || res->status == EXEC_ABORTED)
                control_request_error(cr->req, KS_ERR_FAILED, body, "%s",
                                      res->message ?: "the cell did not run to its end");
        else
                control_request_reply(cr->req, body);
        free(cr);
}

/* The client went away mid-cell: the cell is interrupted, so it never blocks the context. */
static void cell_cancel(ControlRequest *req, void *data) {
        CellRequest *cr = data;

        exec_cell_cancel(cr->cell);
        free(cr);
}

static const ExecSink cell_sink = {
        .on_output = cell_on_output,
        .on_done = cell_on_done,
};

void method_execute(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        const char *code = json_string_value(json_object_get(params, "code"));
        json_t *timeout = json_object_get(params, "timeout");
        usec_t timeout_usec = USEC_INFINITY;
        ContextStateKind st;
        CellRequest *cr;
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
        st = context_state(c);
        if (st == CONTEXT_STOPPED || st == CONTEXT_FAILED || (st == CONTEXT_STOPPING && !context_comes_back(c)))
                return control_request_error(req, KS_ERR_FAILED, NULL, "context %s is not running (state %s%s%s)",
                                             context_name(c), context_state_to_string(st),
                                             context_last_error(c) ? ": " : "", context_last_error(c) ?: "");
        cr = calloc(1, sizeof *cr);
        if (!cr)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        cr->req = req;
        ExecOptions opt = {
                .timeout = timeout_usec,
                .output_limit = context_config(c)->output_limit,
        };
        r = exec_queue_submit(context_exec(c), code, &opt, &cell_sink, cr, &cr->cell);
        if (r < 0) {
                free(cr);
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot send the cell to the kernel: %s",
                                             strerror(-r));
        }
        control_request_set_cancel(req, cell_cancel, cr);
        /* Its streamed outputs and its reply each hold up to output_limit
         * bytes of text, which JSON may double (newlines, quotes). */
        control_request_allow_queue(req, opt.output_limit > SIZE_MAX / 4 ? SIZE_MAX : 4 * opt.output_limit);
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

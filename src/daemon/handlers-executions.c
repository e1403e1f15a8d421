/* The control methods of executions (execution.h): attach, executions and cancel. A request follows an execution
 * through handlers_follow() of handlers-cells.c, as execute's own does. See handlers-private.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "execution.h"
#include "handlers-private.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

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

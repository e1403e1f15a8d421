/* kernelctl's verbs of executions (cells that outlive their caller): attach ID [--from N], executions
 * [CTX] and cancel ID; exec --detach is in kernelctl-exec.c. See kernelctl.h. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "kernelctl-render.h"
#include "kernelctl.h"
#include "macro.h"
#include "protocol.h"
#include "reply.h"
#include "util.h"

typedef struct AttachState {
        const Options *o;
        unsigned n_outputs; /* notifications received */
        long long next;     /* the number after the last output seen */
        char context[256];  /* from the record, for exec's exit() note */
        char id[37];
} AttachState;

static void attach_on_notify(const RpcMessage *m, void *userdata) {
        AttachState *st = userdata;

        if (m->method && streq(m->method, "execution")) {
                _cleanup_(reply_execution_done) ReplyExecution e = {};

                if (reply_execution_decode(m->params, &e, NULL) >= 0) {
                        snprintf(st->context, sizeof st->context, "%s", e.context);
                        snprintf(st->id, sizeof st->id, "%s", e.id);
                }
                return;
        }
        if (m->method && streq(m->method, "output")) {
                ReplyOutput out;

                if (reply_output_decode(m->params, &out, NULL) < 0)
                        return;
                st->n_outputs++;
                if (out.seq >= 0)
                        st->next = out.seq + 1;
                exec_print_output(st->o, out.output);
        }
}

int cmd_attach(const Options *o, char **args, unsigned n_args) {
        _cleanup_(client_reply_done) ClientReply reply = {};
        _cleanup_close_ int fd = -1;
        AttachState st = { .o = o, .next = o->from >= 0 ? o->from : 0 };
        json_auto_t *params = NULL;
        int r;

        (void) n_args;
        params = json_pack("{s:s, s:I}", "id", args[0], "from", (json_int_t) st.next);
        if (!params)
                return client_fail(EXIT_FAILED, "the id is not valid UTF-8 (or out of memory).");
        r = client_connect(o->socket, STATUS_WAIT_USEC, &fd);
        if (r != EXIT_OK)
                return r;
        /* --timeout bounds how long attach follows the cell, which runs on when attach gives up. */
        r = client_transact(fd, "attach", TAKE_PTR(params), o->timeout, attach_on_notify, &st, &reply);
        if (r == EXIT_TIMEOUT && st.id[0])
                fprintf(stderr, "kernelctl: execution %s runs on; attach again with --from %lld.\n", st.id, st.next);
        if (r != EXIT_OK)
                return r;
        /* Only a read from the first output may fall back on the result's: a later one would show them twice. */
        return exec_answer(o, st.context, &reply, st.n_outputs == 0 && st.next == 0);
}

static void print_execution(const ReplyExecution *e) {
        char at[64], count[32];

        snprintf(count, sizeof count, "%lld%s", e->outputs, e->outputs_dropped ? " (dropped)" : "");
        printf("%-36s  %-16s  %-11s  %-14s  %s\n", e->id, e->context, e->state, count,
               format_timestamp(at, sizeof at, e->submitted_at));
}

int cmd_executions(const Options *o, char **args, unsigned n_args) {
        _cleanup_(reply_executions_done) ReplyExecutions list = {};
        json_auto_t *params = json_object(), *result = NULL;
        ReplyProblem problem;
        int r;

        if (!params || (n_args > 0 && json_object_set_new(params, "context", json_string(args[0])) < 0))
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call(o->socket, "executions", TAKE_PTR(params),
                        o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC, &result);
        if (r != EXIT_OK)
                return r;
        if (reply_executions_decode(result, &list, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        printf("%-36s  %-16s  %-11s  %-14s  %s\n", "ID", "CONTEXT", "STATE", "OUTPUTS", "SUBMITTED");
        for (size_t i = 0; i < list.n_executions; i++)
                print_execution(&list.executions[i]);
        return EXIT_OK;
}

int cmd_cancel(const Options *o, char **args, unsigned n_args) {
        _cleanup_(reply_execution_done) ReplyExecution e = {};
        json_auto_t *params = NULL, *result = NULL;
        ReplyProblem problem;
        int r;

        (void) n_args;
        params = json_pack("{s:s}", "id", args[0]);
        if (!params)
                return client_fail(EXIT_FAILED, "the id is not valid UTF-8 (or out of memory).");
        r = client_call(o->socket, "cancel", TAKE_PTR(params),
                        o->timeout != USEC_INFINITY ? o->timeout : STATUS_WAIT_USEC, &result);
        if (r != EXIT_OK)
                return r;
        if (reply_execution_decode(result, &e, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        printf("%s: %s\n", e.id, streq(e.state, "not_started") ? "withdrawn, it will not run" : "interrupted");
        return EXIT_OK;
}

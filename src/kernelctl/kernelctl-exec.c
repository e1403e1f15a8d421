/* kernelctl's exec verb: the cell from the command line or standard input, the outputs as they
 * arrive (rendered, or JSON lines with --stream), the summary and the exit code of the cell's
 * status. See kernelctl.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "kernelctl-render.h"
#include "kernelctl.h"
#include "macro.h"
#include "protocol.h"
#include "render.h"
#include "reply.h"
#include "util.h"

/* exec waits this much beyond the cell's timeout: the kernel has 5 s to
 * answer the interrupt, and the outputs take time to arrive. */
#define EXEC_GRACE_USEC (10 * USEC_PER_SEC)
/* ... and with --kill-after, that much more, and this for the new kernel to start. */
#define EXEC_KILL_RESTART_USEC (60 * USEC_PER_SEC)

typedef struct ExecState {
        const Options *o;
        unsigned n_outputs; /* notifications received */
} ExecState;

static void exec_on_notify(const RpcMessage *m, void *userdata) {
        ExecState *st = userdata;
        ReplyOutput out;

        if (!m->method || !streq(m->method, "output") || reply_output_decode(m->params, &out, NULL) < 0)
                return;
        st->n_outputs++;
        exec_print_output(st->o, out.output);
}

void exec_print_output(const Options *o, const json_t *output) {
        if (o->stream)
                render_json_line(output);
        else if (!o->json)
                render_output(output, o->traceback);
}
/* Reads the whole of stdin, up to the largest request the daemon takes. */
static int read_code(char **ret) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, alloc = 0;

        for (;;) {
                ssize_t k;

                if (alloc - len < 4096) {
                        char *b;

                        if (alloc > PROTOCOL_MAX_LINE)
                                return client_fail(EXIT_FAILED,
                                                   "the cell is too large (kernelsupd takes at most %d bytes).",
                                                   PROTOCOL_MAX_LINE);
                        b = realloc(buf, alloc * 2 + 65536);
                        if (!b)
                                return client_fail(EXIT_FAILED, "out of memory.");
                        buf = b;
                        alloc = alloc * 2 + 65536;
                }
                k = read(STDIN_FILENO, buf + len, alloc - len - 1);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return client_fail(EXIT_FAILED, "cannot read the cell from standard input: %s.",
                                           strerror(errno));
                }
                if (k == 0)
                        break;
                len += (size_t) k;
        }
        buf[len] = '\0';
        if (memchr(buf, '\0', len))
                return client_fail(EXIT_FAILED, "the cell contains a NUL byte.");
        *ret = TAKE_PTR(buf);
        return EXIT_OK;
}

/* What the budget would cut of the outputs' text (--json, --stream): "truncated" on shown, {"kept": K, "dropped": D}
 * when it cuts, else null (as HTTP's answer has it). 0, or -ENOMEM. */
static int exec_truncated(const Options *o, const json_t *outputs, json_t *shown) {
        CellRender *cr;
        const json_t *out;
        size_t i, kept, dropped;
        int r;

        if (o->max_output == 0)
                return json_object_set_new(shown, "truncated", json_null());
        cr = cell_render_new(o->max_output, o->traceback, NULL, NULL);
        if (!cr)
                return -ENOMEM;
        json_array_foreach(outputs, i, out) {
                (void) cell_render_output(cr, out);
        }
        r = cell_render_finish(cr, &kept, &dropped);
        cell_render_free(cr);
        if (r < 0)
                return r;
        if (r == 0)
                return json_object_set_new(shown, "truncated", json_null());
        return json_object_set_new(
                       shown, "truncated",
                       json_pack("{s:I, s:I}", "kept", (json_int_t) kept, "dropped", (json_int_t) dropped)) < 0
                       ? -ENOMEM
                       : 0;
}

/* Why a cell did not end as it ran, in words on one line of stderr: the daemon's message (a timeout, an abort, a
 * death), so that a reader of the text does not take the KeyboardInterrupt of a timeout for a user's Ctrl-C. */
static void exec_status_note(const ClientReply *reply, const ReplyExecResult *res, bool failed) {
        _cleanup_free_ char *why = NULL;
        size_t n;

        if (failed) {
                (void) client_report_error(reply->code, reply->message);
                return;
        }
        /* A cell that never started has said so in its own stderr note, "[not started: ...]". */
        if (!res->message || streq(res->status, "ok") || streq(res->status, "error") ||
            streq(res->status, "not_started"))
                return;
        why = client_sanitize(res->message, false);
        n = why ? strlen(why) : 0;
        fprintf(stderr, "kernelctl: %s%s\n", why ?: "?", n > 0 && why[n - 1] == '.' ? "" : ".");
}

int exec_exit_code(const char *status) {
        if (!status)
                return EXIT_FAILED;
        if (streq(status, "ok"))
                return EXIT_OK;
        if (streq(status, "error"))
                return EXIT_CELL_ERROR;
        if (streq(status, "timeout"))
                return EXIT_TIMEOUT;
        if (streq(status, "not_started"))
                return EXIT_NOT_STARTED;
        if (streq(status, "kernel_aborted"))
                return EXIT_KERNEL_ABORTED;
        return EXIT_FAILED;
}

/* exec --detach: sends execute (params stolen) with detach and on_disconnect keep, and prints the id. */
static int exec_detach(const Options *o, json_t *params) {
        json_auto_t *owned = params, *result = NULL;
        _cleanup_(reply_execution_done) ReplyExecution e = {};
        ReplyProblem problem;
        int r;

        if (json_object_set_new(owned, "detach", json_true()) < 0 ||
            json_object_set_new(owned, "on_disconnect", json_string("keep")) < 0)
                return client_fail(EXIT_FAILED, "out of memory.");
        r = client_call(o->socket, "execute", TAKE_PTR(owned), STATUS_WAIT_USEC, &result);
        if (r != EXIT_OK)
                return r;
        if (reply_execution_decode(result, &e, &problem) < 0)
                return client_invalid_reply(&problem);
        if (o->json)
                return render_json(result);
        printf("%s\n", e.id);
        return EXIT_OK;
}

int cmd_exec(const Options *o, char **args, unsigned n_args) {
        _cleanup_free_ char *stdin_code = NULL;
        json_auto_t *params = NULL;
        _cleanup_close_ int fd = -1;
        _cleanup_(client_reply_done) ClientReply reply = {};
        ExecState st = { .o = o };
        const char *code;
        usec_t wait;
        int r;

        if (n_args < 2 || streq(args[1], "-")) {
                r = read_code(&stdin_code);
                if (r != EXIT_OK)
                        return r;
                code = stdin_code;
        } else
                code = args[1];

        params = json_pack("{s:s, s:s}", "context", args[0], "code", code);
        if (!params)
                /* jansson takes only UTF-8. */
                return client_fail(EXIT_FAILED, "the cell is not valid UTF-8 (or out of memory).");
        if (client_set_timeout(params, o->timeout) < 0 ||
            (o->kill_after && json_object_set_new(params, "kill_after", json_real(client_seconds(o->kill_after))) < 0))
                return client_fail(EXIT_FAILED, "out of memory.");
        if (o->detach)
                return exec_detach(o, TAKE_PTR(params));
        /* Without a cell timeout the cell may run for ever, and so may we. */
        wait = o->timeout == USEC_INFINITY ? USEC_INFINITY : o->timeout + EXEC_GRACE_USEC;
        /* A kill waits for the new kernel: its answer comes once that one is attached. */
        if (wait != USEC_INFINITY && o->kill_after)
                wait += o->kill_after + EXEC_KILL_RESTART_USEC;

        render_output_budget(o->max_output);
        render_output_save_images(o->save_images);
        r = client_connect(o->socket, STATUS_WAIT_USEC, &fd);
        if (r != EXIT_OK)
                return r;
        r = client_transact(fd, "execute", TAKE_PTR(params), wait, exec_on_notify, &st, &reply);
        if (r != EXIT_OK)
                return r;
        return exec_answer(o, args[0], &reply, st.n_outputs == 0);
}

int exec_answer(const Options *o, const char *context, const ClientReply *reply, bool show_result_outputs) {
        ReplyExecResult res;
        ReplyProblem problem;
        const json_t *body;
        bool failed;

        /* A cell that did not run to its end (the kernel died, the context
         * stopped) comes as an error whose data is the result. */
        failed = !reply->result;
        body = failed ? reply->data : reply->result;
        if (reply_exec_result_decode(body, &res, &problem) < 0)
                return failed ? client_report_error(reply->code, reply->message) : client_invalid_reply(&problem);

        if (o->json || o->stream) {
                json_auto_t *shown = json_deep_copy(body);

                if (!shown || (failed && json_object_set_new(shown, "message", json_string(reply->message)) < 0) ||
                    exec_truncated(o, res.outputs, shown) < 0)
                        return client_fail(EXIT_FAILED, "out of memory.");
                if (o->stream)
                        render_json_line(shown);
                else
                        (void) render_json(shown);
        } else {
                const json_t *out;
                size_t i;

                /* A daemon that streamed nothing: the outputs are in the result. */
                if (show_result_outputs)
                        json_array_foreach(res.outputs, i, out) {
                                render_output(out, o->traceback);
                        }
                /* The tail of the text comes before what kernelctl has to say of the cell. */
                (void) render_output_finish(NULL, NULL);
                exec_status_note(reply, &res, failed);
                render_exit_note(res.exit, context);
                render_exec_summary(&res, failed);
        }
        return failed ? EXIT_FAILED : exec_exit_code(res.status);
}

/* Cells over the native API: execute answered as one Execution (application/json) or as Server-Sent Events, and
 * an execution's events read again from any output on (doc/openapi.yaml). The numbering is the daemon's
 * (execution.h): an SSE event's id is its output's number, so Last-Event-ID resumes exactly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-private.h"
#include "reply.h"
#include "shape.h"
#include "util.h"

#define SSE_KEEPALIVE ": keep-alive\n\n"
#define SSE_KEEPALIVE_SEC 15

typedef struct Follow {
        bool sse, begun;
        long long next;    /* the number of the next output the client gets */
        char id[37];       /* the execution's, from the daemon's first notification */
        size_t max_output; /* the budget of the answer's text (render.h); 0: none */
} Follow;

static void follow_free(void *p) {
        free(p);
}

static int sse_event(HttpRequest *r, const char *event, long long id, const json_t *data) {
        _cleanup_free_ char *text = json_dumps(data, JSON_COMPACT), *ev = NULL;
        int n;

        if (!text)
                return -ENOMEM;
        n = id >= 0 ? asprintf(&ev, "id: %lld\nevent: %s\ndata: %s\n\n", id, event, text)
                    : asprintf(&ev, "event: %s\ndata: %s\n\n", event, text);
        if (n < 0)
                return -ENOMEM;
        return http_stream_write(r, ev, (size_t) n);
}

/* The stream begins with the first thing the daemon says, so an error before it is an HTTP status. */
static int follow_begin(HttpRequest *r, Follow *f) {
        if (f->begun)
                return 0;
        f->begun = true;
        return http_stream_begin(r, 200, "text/event-stream", SSE_KEEPALIVE, SSE_KEEPALIVE_SEC);
}

static void follow_notify(HttpRequest *r, const RpcMessage *m) {
        Follow *f = http_request_data(r);
        ReplyOutput out;

        if (m->method && streq(m->method, "execution"))
                snprintf(f->id, sizeof f->id, "%s", json_string_value(json_object_get(m->params, "id")) ?: "");
        if (!f->sse || !m->method || follow_begin(r, f) < 0)
                return;
        if (streq(m->method, "execution"))
                (void) sse_event(r, "execution", -1, m->params);
        else if (streq(m->method, "output") && reply_output_decode(m->params, &out, NULL) >= 0 && out.seq >= f->next) {
                (void) sse_event(r, "output", out.seq, out.output);
                f->next = out.seq + 1;
        }
}

/* The end of a cell as the daemon answered it: a result, or an error whose data is one (the kernel died). NULL: a
 * plain error. */
static const json_t *end_of(const RpcMessage *m, const char **ret_message) {
        const json_t *body = m->kind == RPC_RESULT ? m->result : m->data;
        ReplyExecResult res;

        *ret_message = m->kind == RPC_ERROR ? m->message : NULL;
        if (!body || reply_exec_result_decode(body, &res, NULL) < 0)
                return NULL;
        return body;
}

/* {status, execution_count, kernel_id, message, exit}: what an end says besides the outputs. */
static json_t *end_summary(const json_t *end, const char *message) {
        json_t *j = json_deep_copy(end);

        if (!j)
                return NULL;
        (void) json_object_del(j, "outputs");
        if (message)
                (void) json_object_set_new(j, "message", json_string(message));
        return j;
}

static void sse_done(HttpRequest *r, Follow *f, const RpcMessage *m, int error) {
        const char *message;
        const json_t *end = m ? end_of(m, &message) : NULL, *o;
        json_auto_t *summary = NULL;

        if (!f->begun && !end)
                return http_answer_upstream(r, m, error);
        if (follow_begin(r, f) < 0)
                return;
        if (!end) {
                json_auto_t *e = m ? json_pack("{s:{s:i, s:s}}", "error", "code", m->code, "message", m->message ?: "")
                                   : json_pack("{s:{s:s, s:s}}", "error", "code", "daemon_unavailable", "message",
                                               "kernelsupd went away; attach to the execution again once it is back");
                (void) sse_event(r, "error", -1, e);
                return http_stream_end(r);
        }
        /* Outputs the daemon could not stream to us (we read slower than it sent) are in its answer. */
        for (size_t i = (size_t) f->next; (o = json_array_get(json_object_get(end, "outputs"), i)); i++)
                (void) sse_event(r, "output", (long long) i, o);
        summary = end_summary(end, message);
        (void) sse_event(r, "end", -1, summary);
        http_stream_end(r);
}

/* "text": the cell as kernelctl exec's text mode prints it, for a model; "truncated": {kept, dropped} when the
 * budget cut it, else null. */
static int add_text(json_t *body, const json_t *outputs, size_t max_output) {
        _cleanup_free_ char *text = NULL;
        size_t kept, dropped;
        json_t *t;

        if (shape_text(outputs, max_output, false, &text, &kept, &dropped) < 0)
                return -ENOMEM;
        t = dropped ? json_pack("{s:I, s:I}", "kept", (json_int_t) kept, "dropped", (json_int_t) dropped)
                    : json_null();
        if (!t || json_object_set_new(body, "truncated", t) < 0 ||
            json_object_set_new(body, "text", json_string(text)) < 0)
                return -ENOMEM;
        return 0;
}

static void json_done(HttpRequest *r, Follow *f, const RpcMessage *m, int error) {
        const char *message;
        const json_t *end = m ? end_of(m, &message) : NULL;
        json_t *body = NULL, *summary;
        const char *k;
        json_t *v;

        if (!end)
                return http_answer_upstream(r, m, error);
        if (shape_execution(json_object_get(end, "outputs"), &body) < 0)
                return http_answer_json(r, 500, NULL);
        summary = end_summary(end, message);
        if (*f->id)
                (void) json_object_set_new(body, "id", json_string(f->id));
        json_object_foreach(summary, k, v) {
                (void) json_object_set(body, streq(k, "execution_count") ? "executionCount" : k, v);
        }
        json_decref(summary);
        if (add_text(body, json_object_get(end, "outputs"), f->max_output) < 0) {
                json_decref(body);
                body = NULL;
        }
        http_answer_json(r, 200, body);
}

static void follow_done(HttpRequest *r, const RpcMessage *m, int error) {
        Follow *f = http_request_data(r);

        if (f->sse)
                return sse_done(r, f, m, error);
        json_done(r, f, m, error);
}

static Follow *follow_new(HttpRequest *r, long long from) {
        Follow *f = calloc(1, sizeof *f);

        if (!f) {
                http_answer_error(r, 500, "internal", "out of memory");
                return NULL;
        }
        f->sse = http_request_accepts(r, "text/event-stream");
        f->next = from;
        http_request_set_data(r, f, follow_free);
        return f;
}

static void follow_call(HttpRequest *r, const char *method, json_t *params) {
        if (!params)
                return http_answer_error(r, 500, "internal", "out of memory");
        http_call(r, method, params, follow_notify, follow_done);
}

void api_route_execute(HttpRequest *r, char **args) {
        json_auto_t *body = http_request_json(r);
        const json_t *code, *timeout, *od, *mo, *ka;
        size_t max_output = 0;
        const char *why;
        Follow *f;
        json_t *p;

        if (!body)
                return;
        code = json_object_get(body, "code");
        timeout = json_object_get(body, "timeout");
        od = json_object_get(body, "on_disconnect");
        mo = json_object_get(body, "max_output");
        ka = json_object_get(body, "kill_after");
        if (!json_is_string(code))
                return http_answer_error(r, 400, "invalid_params", "code must be a string");
        if (timeout && !json_is_number(timeout))
                return http_answer_error(r, 400, "invalid_params", "timeout must be a number of seconds");
        if (ka && !json_is_number(ka))
                return http_answer_error(r, 400, "invalid_params", "kill_after must be a number of seconds");
        if (od && !json_is_string(od))
                return http_answer_error(r, 400, "invalid_params", "on_disconnect must be \"interrupt\" or \"keep\"");
        if (mo && !(json_is_integer(mo) && json_integer_value(mo) >= 0) &&
            !(json_is_string(mo) && parse_size(json_string_value(mo), &max_output, &why) >= 0))
                return http_answer_error(r, 400, "invalid_params",
                                         "max_output must be a number of bytes or a size from 1K to 1G (\"4K\")");
        if (json_is_integer(mo))
                max_output = (size_t) json_integer_value(mo);
        if (!(f = follow_new(r, 0)))
                return;
        f->max_output = max_output;
        p = json_pack("{s:s, s:O, s:O*, s:O*, s:O*}", "context", args[0], "code", code, "timeout", timeout,
                      "on_disconnect", od, "kill_after", ka);
        follow_call(r, "execute", p);
}

/* The first output wanted: ?from=N, else the one after Last-Event-ID (an SSE client's reconnect), else 0. -1 after
 * answering 400. */
static long long events_from(HttpRequest *r) {
        const char *from = http_request_query(r, "from"), *last = http_request_header(r, "Last-Event-ID");
        unsigned long long v;

        if (from) {
                if (parse_uint(from, 0, INT64_MAX, &v) < 0) {
                        http_answer_error(r, 400, "invalid_params", "from must be an output's number, 0 or more");
                        return -1;
                }
                return (long long) v;
        }
        if (last && *last) {
                if (parse_uint(last, 0, INT64_MAX - 1, &v) < 0) {
                        http_answer_error(r, 400, "invalid_params", "Last-Event-ID must be an output's number");
                        return -1;
                }
                return (long long) v + 1;
        }
        return 0;
}

void api_route_events(HttpRequest *r, char **args) {
        long long from = events_from(r);
        Follow *f;

        if (from < 0 || !(f = follow_new(r, from)))
                return;
        /* The events of an execution are a stream whatever the client accepts. */
        f->sse = true;
        follow_call(r, "attach", json_pack("{s:s, s:I}", "id", args[0], "from", (json_int_t) from));
}

void api_route_executions(HttpRequest *r, char **args) {
        const char *ctx = http_request_query(r, "context");

        (void) args;
        api_proxy(r, "executions", ctx ? json_pack("{s:s}", "context", ctx) : json_object());
}

static void execution_done(HttpRequest *r, const RpcMessage *m, int error) {
        const char *id = http_request_data(r);
        const json_t *e;
        size_t i;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        json_array_foreach(json_object_get(m->result, "executions"), i, e) {
                const char *eid = json_string_value(json_object_get(e, "id"));
                if (eid && streq(eid, id))
                        return http_answer_json(r, 200, json_incref((json_t *) e));
        }
        http_answer_error(r, 404, "no_such_execution", "no such execution: %.36s", id);
}

void api_route_execution(HttpRequest *r, char **args) {
        char *id = strdup(args[0]);

        if (!id)
                return http_answer_error(r, 500, "internal", "out of memory");
        http_request_set_data(r, id, free);
        http_call(r, "executions", json_object(), NULL, execution_done);
}

void api_route_cancel(HttpRequest *r, char **args) {
        api_proxy(r, "cancel", json_pack("{s:s}", "id", args[0]));
}

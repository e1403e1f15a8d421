/* E2B's code-interpreter routes, as its stock SDK (@e2b/code-interpreter) calls them: GET /health, POST /execute
 * (a stream of JSON lines), and the contexts (doc/e2b-protocol.md is the contract, section by section). An E2B
 * context id is a kernelsupd context's name. Unlike E2B, a cell runs on when its client goes away. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "reply.h"
#include "shape.h"
#include "util.h"

/* Section 4: a line after 5 s of quiet, so that a client gone is seen at the next write. */
#define E2B_KEEPALIVE "{\"type\":\"keepalive\"}\n"
#define E2B_KEEPALIVE_SEC 5
/* The context of a cell that names neither a context_id nor a language, and of language "python". */
#define E2B_DEFAULT_CONTEXT "default"

typedef struct E2bRun {
        bool begun, errored; /* the stream's 200 went out; an error line was sent */
        long long next;      /* the number of the next output */
        json_t *params;      /* execute's, while the context is looked up by language */
        char *language;
} E2bRun;

static void run_free(void *p) {
        E2bRun *run = p;

        json_decref(run->params);
        free(run->language);
        free(run);
}

/* One line of the stream: ASCII-only JSON (the SDK decodes each chunk on its own, so a character split over two
 * would be lost), "\n" after it. j is stolen. */
static int put_line(HttpRequest *r, json_t *j) {
        _cleanup_free_ char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        size_t n;
        int k;

        json_decref(j);
        if (!text)
                return -ENOMEM;
        n = strlen(text);
        k = http_stream_write(r, text, n);
        return k < 0 ? k : http_stream_write(r, "\n", 1);
}

static int run_begin(HttpRequest *r, E2bRun *run) {
        if (run->begun)
                return 0;
        run->begun = true;
        return http_stream_begin(r, 200, "application/x-ndjson", E2B_KEEPALIVE, E2B_KEEPALIVE_SEC);
}

/* text/plain's one pair of enclosing quotes goes, as E2B's server strips them (result.py): 'abc' is abc. */
static void strip_quotes(json_t *result) {
        const char *t = json_string_value(json_object_get(result, "text"));
        size_t n = t ? strlen(t) : 0;

        if (n >= 2 && (t[0] == '\'' || t[0] == '"') && t[n - 1] == t[0])
                (void) json_object_set_new(result, "text", json_stringn(t + 1, n - 2));
}

/* An error output's whole traceback as one string without ANSI colours (E2B's kernels run NoColor), as
 * kernelctl exec --traceback prints it. NULL on out of memory. */
static char *traceback_text(const json_t *error) {
        json_auto_t *one = json_pack("[O]", error);
        char *text = NULL;

        return one && shape_text(one, 0, true, &text, NULL, NULL) >= 0 ? text : NULL;
}

/* One of the cell's outputs as its line (section 4), or nothing (clear_output, update_display_data). */
static void put_output(HttpRequest *r, E2bRun *run, const json_t *o) {
        const char *type = json_string_value(json_object_get(o, "output_type"));
        json_t *line = NULL;
        char now[64];

        if (!type)
                return;
        if (streq(type, "stream")) {
                format_timestamp(now, sizeof now, now_usec(CLOCK_REALTIME));
                line = json_pack("{s:s, s:O, s:s}", "type",
                                 streq_ptr(json_string_value(json_object_get(o, "name")), "stderr") ? "stderr"
                                                                                                    : "stdout",
                                 "text", json_object_get(o, "text"), "timestamp", now);
        } else if (streq(type, "display_data") || streq(type, "execute_result") ||
                   streq(type, "update_display_data")) {
                /* An update of a display is its new state, one more result (E2B's server drops it). */
                json_auto_t *as = streq(type, "update_display_data")
                                          ? json_pack("{s:s, s:O}", "output_type", "display_data", "data",
                                                      json_object_get(o, "data"))
                                          : json_incref((json_t *) o);

                if (!as || shape_result(as, "is_main_result", &line) < 0)
                        return;
                strip_quotes(line);
                if (!json_object_get(line, "extra"))
                        (void) json_object_set_new(line, "extra", json_object());
                (void) json_object_set_new(line, "type", json_string("result"));
        } else if (streq(type, "error")) {
                _cleanup_free_ char *tb = NULL;

                /* Only a cell's first error, as E2B's server sends it. */
                if (run->errored || !(tb = traceback_text(o)))
                        return;
                run->errored = true;
                line = json_pack("{s:s, s:O?, s:O?, s:s}", "type", "error", "name", json_object_get(o, "ename"),
                                 "value", json_object_get(o, "evalue"), "traceback", tb);
        }
        if (line)
                (void) put_line(r, line);
}

static void execute_notify(HttpRequest *r, const RpcMessage *m) {
        E2bRun *run = http_request_data(r);
        ReplyOutput out;

        if (!m->method || run_begin(r, run) < 0)
                return;
        /* Ours, first: the execution's id (GET /v1/executions/ID/events reads it again). The SDK skips a type it
         * does not know. */
        if (streq(m->method, "execution"))
                (void) put_line(r,
                                json_pack("{s:s, s:O?}", "type", "execution", "id", json_object_get(m->params, "id")));
        else if (streq(m->method, "output") && reply_output_decode(m->params, &out, NULL) >= 0 &&
                 out.seq >= run->next) {
                put_output(r, run, out.output);
                run->next = out.seq + 1;
        }
}

/* Why a cell did not end as it ran, as an error line of E2B's kind (its server makes some of its own). */
static const char *status_error_name(const char *status) {
        return streq(status, "timeout")          ? "ExecutionTimeout"
               : streq(status, "died")           ? "ContextRestarting"
               : streq(status, "not_started")    ? "ExecutionAborted"
               : streq(status, "kernel_aborted") ? "ExecutionAborted"
               : streq(status, "aborted")        ? "ExecutionAborted"
                                                 : NULL;
}

static void execute_done(HttpRequest *r, const RpcMessage *m, int error) {
        E2bRun *run = http_request_data(r);
        const json_t *body = m ? (m->kind == RPC_RESULT ? m->result : m->data) : NULL, *o, *count;
        const char *status, *name;
        ReplyExecResult res;

        if (!body || reply_exec_result_decode(body, &res, NULL) < 0) {
                if (!run->begun)
                        return http_answer_upstream(r, m, error);
                /* The stream has begun: what went wrong is its last error. */
                (void) put_line(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", "DaemonUnavailable",
                                             "value",
                                             m ? m->message ?: "failed" : "kernelsupd went away before the cell ended",
                                             "traceback", ""));
                (void) put_line(r, json_pack("{s:s}", "type", "end_of_execution"));
                return http_stream_end(r);
        }
        if (run_begin(r, run) < 0)
                return;
        /* Outputs the daemon could not stream to us (we read slower than it sent) are in its answer. */
        for (size_t i = (size_t) run->next; (o = json_array_get(json_object_get(body, "outputs"), i)); i++)
                put_output(r, run, o);
        /* A cell's exit() does not end a supervised kernel: said as kernelctl says it, on stderr. */
        if (res.exit) {
                char now[64];

                format_timestamp(now, sizeof now, now_usec(CLOCK_REALTIME));
                (void) put_line(r,
                                json_pack("{s:s, s:s, s:s}", "type", "stderr", "text",
                                          streq(res.exit, "kept")
                                                  ? "[kernelsup: the cell called exit(); a supervised kernel is not "
                                                    "a cell's to end: the kernel and its namespace were kept]\n"
                                                  : "[kernelsup: the cell called exit() and the kernel is ending: "
                                                    "the next cell runs in a new kernel, which starts empty]\n",
                                          "timestamp", now));
        }
        count = json_object_get(body, "execution_count");
        if (json_is_integer(count))
                (void) put_line(r, json_pack("{s:s, s:O}", "type", "number_of_executions", "execution_count", count));
        status = json_string_value(json_object_get(body, "status")) ?: "";
        name = status_error_name(status);
        /* It replaces a KeyboardInterrupt of a timeout: the SDK keeps the last error, and this one says why. */
        if (name)
                (void) put_line(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value",
                                             (m->kind == RPC_ERROR ? m->message : NULL) ?: res.message ?: status,
                                             "traceback", ""));
        (void) put_line(r, json_pack("{s:s}", "type", "end_of_execution"));
        http_stream_end(r);
}

static void execute_in(HttpRequest *r, E2bRun *run, const char *context) {
        json_t *p = run->params;

        run->params = NULL;
        if (json_object_set_new(p, "context", json_string(context)) < 0) {
                json_decref(p);
                return http_answer_error(r, 500, "internal", "out of memory");
        }
        http_call(r, "execute", p, execute_notify, execute_done);
}

/* language: the context named default when it is of that language, else the first (by the status's order) that is. */
static void language_done(HttpRequest *r, const RpcMessage *m, int error) {
        E2bRun *run = http_request_data(r);
        const char *pick = NULL;
        const json_t *c;
        size_t i;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        json_array_foreach(json_object_get(m->result, "contexts"), i, c) {
                const char *l = json_string_value(json_object_get(c, "language")) ?: "python";
                const char *n = json_string_value(json_object_get(c, "name"));

                if (!n || strcasecmp(l, run->language) != 0)
                        continue;
                if (!pick || streq(n, E2B_DEFAULT_CONTEXT))
                        pick = n;
        }
        if (!pick)
                return http_answer_error(r, 404, "no_such_context",
                                         "no context runs language %s (add one: POST /contexts)", run->language);
        execute_in(r, run, pick);
}

/* E2B's names of a language: lower case, trimmed, js is javascript, ts typescript (run on javascript), empty is
 * python (contexts.py). New string; NULL on out of memory. */
static char *normalize_language(const char *l) {
        size_t n;
        char *s;

        while (*l == ' ' || *l == '\t')
                l++;
        n = strlen(l);
        while (n > 0 && (l[n - 1] == ' ' || l[n - 1] == '\t'))
                n--;
        s = strndup(l, n);
        if (!s)
                return NULL;
        for (char *p = s; *p; p++)
                *p = (char) (*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        if (!*s || streq(s, "js") || streq(s, "ts") || streq(s, "typescript")) {
                const char *to = !*s ? "python" : "javascript";
                free(s);
                return strdup(to);
        }
        return s;
}

static void route_execute(HttpRequest *r, char **args) {
        json_auto_t *body = http_request_json(r);
        const json_t *code, *ctx, *lang, *env, *timeout;
        E2bRun *run;

        (void) args;
        if (!body)
                return;
        code = json_object_get(body, "code");
        ctx = json_object_get(body, "context_id");
        lang = json_object_get(body, "language");
        env = json_object_get(body, "env_vars");
        timeout = json_object_get(body, "timeout");
        if (!json_is_string(code))
                return http_answer_error(r, 400, "invalid_params", "code must be a string");
        if (ctx && lang && !json_is_null(ctx) && !json_is_null(lang))
                return http_answer_error(r, 400, "invalid_params",
                                         "Only one of context_id or language can be provided");
        if ((ctx && !json_is_null(ctx) && !json_is_string(ctx)) ||
            (lang && !json_is_null(lang) && !json_is_string(lang)))
                return http_answer_error(r, 400, "invalid_params", "context_id and language must be strings");
        if (timeout && !json_is_number(timeout))
                return http_answer_error(r, 400, "invalid_params", "timeout must be a number of seconds");
        if (env && !json_is_null(env) && !(json_is_object(env) && json_object_size(env) == 0))
                return http_answer_error(r, 400, "not_supported",
                                         "env_vars are not supported here: set them in the cell, or in the context's "
                                         "env (POST /v1/contexts)");
        run = calloc(1, sizeof *run);
        if (run)
                /* E2B interrupts a cell whose client went away (its SDK's timeoutMs drops the connection);
                 * kernelsup keeps it running, and its outputs (GET /v1/executions/ID/events). */
                run->params = json_pack("{s:O, s:O*, s:s}", "code", code, "timeout", timeout, "on_disconnect", "keep");
        if (!run || !run->params) {
                free(run);
                return http_answer_error(r, 500, "internal", "out of memory");
        }
        http_request_set_data(r, run, run_free);
        if (json_is_string(ctx))
                return execute_in(r, run, json_string_value(ctx));
        run->language = normalize_language(json_is_string(lang) ? json_string_value(lang) : "");
        if (!run->language)
                return http_answer_error(r, 500, "internal", "out of memory");
        if (streq(run->language, "python") && !json_is_string(lang))
                return execute_in(r, run, E2B_DEFAULT_CONTEXT);
        http_call(r, "status", json_object(), NULL, language_done);
}

/* ---- Contexts (section 5) ---- */

/* {id, language, cwd} of a status object; NULL on out of memory. */
static json_t *context_of(const json_t *c) {
        return json_pack("{s:O, s:s, s:s}", "id", json_object_get(c, "name"), "language",
                         json_string_value(json_object_get(c, "language")) ?: "python", "cwd",
                         json_string_value(json_object_get(c, "cwd")) ?: "~");
}

static void list_done(HttpRequest *r, const RpcMessage *m, int error) {
        json_t *list = json_array();
        const json_t *c;
        size_t i;

        if (!m || m->kind == RPC_ERROR) {
                json_decref(list);
                return http_answer_upstream(r, m, error);
        }
        json_array_foreach(json_object_get(m->result, "contexts"), i, c) {
                if (list && json_array_append_new(list, context_of(c)) < 0) {
                        json_decref(list);
                        list = NULL;
                }
        }
        http_answer_json(r, 200, list);
}

static void route_list(HttpRequest *r, char **args) {
        (void) args;
        http_call(r, "status", json_object(), NULL, list_done);
}

static void created_done(HttpRequest *r, const RpcMessage *m, int error) {
        const json_t *c;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        c = json_array_get(json_object_get(m->result, "contexts"), 0);
        if (!c)
                return http_answer_error(r, 502, "daemon_error", "status answered no context");
        http_answer_json(r, 200, context_of(c));
}

/* POST /contexts {language, cwd}: a new context named e2b-XXXXXXXX, with the first kernelspec of the language. */
static void route_create(HttpRequest *r, char **args) {
        json_auto_t *body = http_request_json(r);
        const json_t *lang, *cwd;
        _cleanup_free_ char *language = NULL;
        unsigned char rnd[4];
        char name[32];

        (void) args;
        if (!body)
                return;
        lang = json_object_get(body, "language");
        cwd = json_object_get(body, "cwd");
        if ((lang && !json_is_null(lang) && !json_is_string(lang)) ||
            (cwd && !json_is_null(cwd) && !json_is_string(cwd)))
                return http_answer_error(r, 400, "invalid_params", "language and cwd must be strings");
        language = normalize_language(json_is_string(lang) ? json_string_value(lang) : "");
        if (!language || random_bytes(rnd, sizeof rnd) < 0)
                return http_answer_error(r, 500, "internal", "out of memory, or no random bytes");
        snprintf(name, sizeof name, "e2b-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
        api_context_add(r, name, language,
                        json_pack("{s:s, s:O*}", "context", name, "cwd", json_is_string(cwd) ? cwd : NULL),
                        created_done);
}

static void null_done(HttpRequest *r, const RpcMessage *m, int error) {
        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        http_answer_json(r, 200, json_null());
}

static void route_remove(HttpRequest *r, char **args) {
        http_call(r, "remove", json_pack("{s:s}", "context", args[0]), NULL, null_done);
}

static void route_restart(HttpRequest *r, char **args) {
        http_call(r, "restart", json_pack("{s:s}", "context", args[0]), NULL, null_done);
}

static void route_health(HttpRequest *r, char **args) {
        (void) args;
        http_answer_json(r, 200, json_string("OK"));
}

const HttpRoute e2b_routes[] = {
        { "GET", "/health", route_health },        { "POST", "/execute", route_execute },
        { "GET", "/contexts", route_list },        { "POST", "/contexts", route_create },
        { "DELETE", "/contexts/*", route_remove }, { "POST", "/contexts/*/restart", route_restart },
};
const size_t e2b_n_routes = ELEMENTSOF(e2b_routes);

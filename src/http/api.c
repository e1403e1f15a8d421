/* The native API (/v1): each route one control request, or a few, to the daemon (doc/openapi.yaml). Execute and
 * the events of an execution are in api-exec.c. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api-private.h"
#include "reply.h"
#include "util.h"

/* ---- The daemon and its contexts ---- */

static void route_status(HttpRequest *r, char **args) {
        (void) args;
        api_proxy(r, "status", json_object());
}

static void contexts_done(HttpRequest *r, const RpcMessage *m, int error) {
        json_t *contexts;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        contexts = json_object_get(m->result, "contexts");
        http_answer_json(r, 200, json_pack("{s:O}", "contexts", contexts ?: json_null()));
}

static void route_contexts(HttpRequest *r, char **args) {
        (void) args;
        http_call(r, "status", json_object(), NULL, contexts_done);
}

static void context_done(HttpRequest *r, const RpcMessage *m, int error) {
        json_t *c;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        c = json_array_get(json_object_get(m->result, "contexts"), 0);
        if (!c)
                return http_answer_error(r, 502, "daemon_error", "status answered no context");
        http_answer_json(r, http_request_data(r) ? 201 : 200, json_incref(c));
}

static void context_status(HttpRequest *r, const char *name) {
        http_call(r, "status", json_pack("{s:[s]}", "contexts", name), NULL, context_done);
}

static void route_context(HttpRequest *r, char **args) {
        context_status(r, args[0]);
}

static void route_context_remove(HttpRequest *r, char **args) {
        api_proxy(r, "remove", api_context_params(r, args[0]));
}

static void route_start(HttpRequest *r, char **args) {
        json_t *p = api_context_params(r, args[0]);

        if (p)
                api_proxy(r, "start", p);
}

static void route_stop(HttpRequest *r, char **args) {
        json_t *p = api_context_params(r, args[0]);

        if (p)
                api_proxy(r, "stop", p);
}

static void route_restart(HttpRequest *r, char **args) {
        json_t *p = api_context_params(r, args[0]);

        if (p)
                api_proxy(r, "restart", p);
}

static void route_interrupt(HttpRequest *r, char **args) {
        json_t *p = api_context_params(r, args[0]);

        if (p)
                api_proxy(r, "interrupt", p);
}

/* check's verdict, as kernelctl check says it (reply_check_verdict): a member "verdict" added to its answer. A
 * context that does not answer in time is the daemon's 504. */
static void check_done(HttpRequest *r, const RpcMessage *m, int error) {
        _cleanup_(reply_check_done) ReplyCheck check = {};
        json_t *j;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        if (reply_check_decode(m->result, &check, NULL) < 0)
                return http_answer_error(r, 502, "daemon_error", "check's answer cannot be read");
        j = json_deep_copy(m->result);
        if (j &&
            json_object_set_new(j, "verdict", json_string(reply_check_verdict(&check, http_request_data(r)))) < 0) {
                json_decref(j);
                j = NULL;
        }
        http_answer_json(r, 200, j);
}

static void route_check(HttpRequest *r, char **args) {
        const char *expect = http_request_query(r, "expect"), *timeout = http_request_query(r, "timeout");
        json_t *p = json_pack("{s:s}", "context", args[0]);
        double t;
        char *end;

        if (p && expect) {
                char *e = strdup(expect);
                if (!e || json_object_set_new(p, "expect", json_string(expect)) < 0) {
                        free(e);
                        json_decref(p);
                        return http_answer_error(r, 400, "invalid_params", "expect must be a kernel_id");
                }
                http_request_set_data(r, e, free);
        }
        if (p && timeout) {
                t = strtod(timeout, &end);
                if (end == timeout || *end) {
                        json_decref(p);
                        return http_answer_error(r, 400, "invalid_params", "timeout must be a number of seconds");
                }
                (void) json_object_set_new(p, "timeout", json_real(t));
        }
        if (!p)
                return http_answer_error(r, 500, "internal", "out of memory");
        http_call(r, "check", p, NULL, check_done);
}

/* ---- Adding a context ---- */

typedef struct AddState {
        json_t *params; /* add's, once the kernel is known */
        char *name;
        HttpCallDone answer; /* gets the new context's status */
} AddState;

static void add_state_free(void *p) {
        AddState *a = p;

        if (!a)
                return;
        json_decref(a->params);
        free(a->name);
        free(a);
}

static void add_done(HttpRequest *r, const RpcMessage *m, int error) {
        AddState *a = http_request_data(r);

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        http_call(r, "status", json_pack("{s:[s]}", "contexts", a->name), NULL, a->answer);
}

/* "language" without "kernel": the first kernelspec (by name) of that language. */
static void kernels_done(HttpRequest *r, const RpcMessage *m, int error) {
        AddState *a = http_request_data(r);
        const char *language = json_string_value(json_object_get(a->params, "language"));
        const json_t *k;
        size_t i;

        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        json_array_foreach(json_object_get(m->result, "kernels"), i, k) {
                const char *l = json_string_value(json_object_get(k, "language"));
                if (l && strcasecmp(l, language) == 0) {
                        (void) json_object_set(a->params, "kernel", json_object_get(k, "name"));
                        (void) json_object_del(a->params, "language");
                        return http_call(r, "add", json_incref(a->params), NULL, add_done);
                }
        }
        http_answer_error(r, 400, "no_such_language", "no installed kernelspec is of language %s", language);
}

/* env as an object {"K": "V"} or an array ["K=V"]: add takes the array. */
static int env_param(const json_t *env, json_t **ret) {
        const char *k;
        json_t *v, *a;

        if (!env || json_is_array(env)) {
                *ret = env ? json_incref((json_t *) env) : NULL;
                return 0;
        }
        if (!json_is_object(env) || !(a = json_array()))
                return -1;
        json_object_foreach((json_t *) env, k, v) {
                char *kv;
                if (!json_is_string(v) || asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0) {
                        json_decref(a);
                        return -1;
                }
                (void) json_array_append_new(a, json_string(kv));
                free(kv);
        }
        *ret = a;
        return 0;
}

void api_context_add(HttpRequest *r, const char *name, const char *language, json_t *params, HttpCallDone answer) {
        AddState *a = calloc(1, sizeof *a);

        if (a && (a->name = strdup(name)))
                a->params = params;
        if (!a || !a->params) {
                json_decref(params);
                add_state_free(a);
                return http_answer_error(r, 500, "internal", "out of memory");
        }
        a->answer = answer;
        http_request_set_data(r, a, add_state_free);
        if (language && !json_object_get(params, "kernel")) {
                (void) json_object_set_new(a->params, "language", json_string(language));
                return http_call(r, "kernels", json_object(), NULL, kernels_done);
        }
        http_call(r, "add", json_incref(a->params), NULL, add_done);
}

static void route_context_add(HttpRequest *r, char **args) {
        json_auto_t *body = http_request_json(r);
        const char *name;
        json_t *env = NULL;

        (void) args;
        if (!body)
                return;
        name = json_string_value(json_object_get(body, "name"));
        if (!name)
                return http_answer_error(r, 400, "invalid_params", "name must be a string");
        if (env_param(json_object_get(body, "env"), &env) < 0)
                return http_answer_error(r, 400, "invalid_params", "env must be an object of strings or K=V strings");
        /* 201: context_done sees the request's data, which says it was created. */
        api_context_add(r, name, json_string_value(json_object_get(body, "language")),
                        json_pack("{s:s, s:O*, s:O*, s:o*}", "context", name, "kernel",
                                  json_object_get(body, "kernel"), "cwd", json_object_get(body, "cwd"), "env", env),
                        context_done);
}

/* ---- The table ---- */

const HttpRoute api_v1_routes[] = {
        { "GET", "/v1/status", route_status },
        { "GET", "/v1/contexts", route_contexts },
        { "POST", "/v1/contexts", route_context_add },
        { "GET", "/v1/contexts/*", route_context },
        { "DELETE", "/v1/contexts/*", route_context_remove },
        { "POST", "/v1/contexts/*/start", route_start },
        { "POST", "/v1/contexts/*/stop", route_stop },
        { "POST", "/v1/contexts/*/restart", route_restart },
        { "POST", "/v1/contexts/*/interrupt", route_interrupt },
        { "GET", "/v1/contexts/*/check", route_check },
        { "POST", "/v1/contexts/*/execute", api_route_execute },
        { "GET", "/v1/executions", api_route_executions },
        { "GET", "/v1/executions/*", api_route_execution },
        { "DELETE", "/v1/executions/*", api_route_cancel },
        { "GET", "/v1/executions/*/events", api_route_events },
};
const size_t api_v1_n_routes = ELEMENTSOF(api_v1_routes);

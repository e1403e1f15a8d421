/* What the routes of the native API share: a request passed to the daemon as it is (api.h). */
#include "api.h"

static void proxy_done(HttpRequest *r, const RpcMessage *m, int error) {
        if (!m || m->kind == RPC_ERROR)
                return http_answer_upstream(r, m, error);
        http_answer_json(r, 200, json_incref(m->result));
}

void api_proxy(HttpRequest *r, const char *method, json_t *params) {
        if (!params)
                return http_answer_error(r, 500, "internal", "out of memory");
        http_call(r, method, params, NULL, proxy_done);
}

json_t *api_context_params(HttpRequest *r, const char *name) {
        json_auto_t *body = http_request_json(r);
        json_t *timeout, *p;

        if (!body)
                return NULL;
        timeout = json_object_get(body, "timeout");
        if (timeout && !json_is_number(timeout)) {
                http_answer_error(r, 400, "invalid_params", "timeout must be a number of seconds");
                return NULL;
        }
        p = json_pack("{s:s, s:O*}", "context", name, "timeout", timeout);
        if (!p)
                http_answer_error(r, 500, "internal", "out of memory");
        return p;
}

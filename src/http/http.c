/* The server of http.h: connections, checks and requests. Streams are in http-stream.c. */
#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "http-private.h"
#include "log.h"
#include "route.h"
#include "util.h"

/* ---- Answers ---- */

static struct MHD_Response *response_new(const char *content_type, char *body, size_t len) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);

        if (!resp) {
                free(body);
                return NULL;
        }
        if (content_type)
                (void) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        (void) MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        (void) MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        return resp;
}

/* Sets the answer; a request waiting for it is resumed, and MHD sends it from on_access. */
void request_set_response(HttpRequest *r, unsigned status, struct MHD_Response *resp) {
        if (r->response || r->ended) {
                if (resp)
                        MHD_destroy_response(resp);
                return;
        }
        if (!resp) {
                status = MHD_HTTP_INTERNAL_SERVER_ERROR;
                resp = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
                if (!resp) {
                        r->failed = true;
                        request_resume(r);
                        return;
                }
        }
        r->response = resp;
        r->status = status;
        request_resume(r);
}

void http_answer_json(HttpRequest *r, unsigned status, json_t *body) {
        char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        struct MHD_Response *resp = NULL;

        json_decref(body);
        if (text) {
                size_t len = strlen(text);
                char *t = realloc(text, len + 2);
                if (t) {
                        t[len] = '\n';
                        t[len + 1] = '\0';
                        resp = response_new("application/json", t, len + 1);
                } else
                        free(text);
        }
        request_set_response(r, status, resp);
}

void http_answer_empty(HttpRequest *r, unsigned status) {
        request_set_response(r, status, response_new(NULL, NULL, 0));
}

static void answer_errorv(HttpRequest *r, unsigned status, const char *code, const char *fmt, va_list ap) {
        _cleanup_free_ char *message = NULL;
        json_t *body = NULL;

        if (vasprintf(&message, fmt, ap) >= 0)
                body = json_pack("{s:{s:s, s:s%}}", "error", "code", code, "message", message, strlen(message));
        http_answer_json(r, status, body);
}

void http_answer_error(HttpRequest *r, unsigned status, const char *code, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        answer_errorv(r, status, code, fmt, ap);
        va_end(ap);
}

unsigned http_status_of_rpc(int rpc_code, const char **ret_code) {
        static const struct {
                int rpc;
                unsigned status;
                const char *code;
        } map[] = {
                { KS_ERR_NO_CONTEXT, 404, "no_such_context" },
                { KS_ERR_NO_EXECUTION, 404, "no_such_execution" },
                { KS_ERR_PERMISSION, 403, "permission_denied" },
                { KS_ERR_TIMEOUT, 504, "timeout" },
                { KS_ERR_FAILED, 409, "failed" },
                { KS_ERR_REPLACED, 409, "replaced" },
                { KS_ERR_CELL_ERROR, 422, "cell_error" },
                { RPC_INVALID_PARAMS, 400, "invalid_params" },
                { RPC_METHOD_NOT_FOUND, 501, "not_supported" },
        };

        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (map[i].rpc == rpc_code) {
                        *ret_code = map[i].code;
                        return map[i].status;
                }
        *ret_code = "internal";
        return 500;
}

/* 503 with Retry-After: the daemon is not there, or refused the connection (its bounds on connections). */
static void answer_unavailable(HttpRequest *r, const char *code, const char *message) {
        json_t *body = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message);
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        struct MHD_Response *resp = text ? response_new("application/json", text, strlen(text)) : NULL;

        json_decref(body);
        if (resp)
                (void) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
        request_set_response(r, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
}

void http_answer_upstream(HttpRequest *r, const RpcMessage *m, int error) {
        const char *code;
        unsigned status;

        /* An error line that answers no request of ours: the daemon refused the connection itself. */
        if (m && (!m->id || json_is_null(m->id)))
                return answer_unavailable(r, "daemon_busy", m->message ?: "kernelsupd refused the connection");
        if (m) {
                status = http_status_of_rpc(m->code, &code);
                return http_answer_error(r, status, code, "%s", m->message ?: "failed");
        }
        /* A full listen queue: the daemon is there but has more connections than it has taken yet. */
        if (error == -EAGAIN)
                return answer_unavailable(r, "daemon_busy", "kernelsupd has more connections waiting than it queues");
        if (error == -ENOENT || error == -ECONNREFUSED || error == -ECONNRESET)
                return answer_unavailable(r, "daemon_unavailable",
                                          error == -ECONNRESET ? "kernelsupd went away before it answered"
                                                               : "kernelsupd is not running or not listening");
        http_answer_error(r, 502, "daemon_error", "the control connection failed: %s", strerror(-error));
}

/* ---- What a route reads ---- */

const char *http_request_method(const HttpRequest *r) {
        return r->method;
}

const char *http_request_header(const HttpRequest *r, const char *name) {
        return MHD_lookup_connection_value(r->mhd, MHD_HEADER_KIND, name);
}

const char *http_request_query(const HttpRequest *r, const char *key) {
        return MHD_lookup_connection_value(r->mhd, MHD_GET_ARGUMENT_KIND, key);
}

uv_loop_t *http_request_loop(const HttpRequest *r) {
        return r->server->loop;
}

void http_request_set_data(HttpRequest *r, void *data, void (*free_fn)(void *)) {
        r->data = data;
        r->data_free = free_fn;
}

void *http_request_data(const HttpRequest *r) {
        return r->data;
}

/* The media type of a header value, without parameters and case: "application/json; charset=utf-8" -> true. */
static bool media_type_is(const char *value, const char *type) {
        size_t n = strlen(type);

        while (*value == ' ')
                value++;
        return strncasecmp(value, type, n) == 0 && (value[n] == '\0' || value[n] == ';' || value[n] == ' ');
}

json_t *http_request_json(HttpRequest *r) {
        const char *ct = http_request_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        json_error_t err;
        json_t *j;

        if (r->body_len == 0)
                return json_object();
        if (ct && !media_type_is(ct, "application/json")) {
                http_answer_error(r, 415, "unsupported_media_type", "the body must be application/json");
                return NULL;
        }
        j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &err);
        if (!j) {
                http_answer_error(r, 400, "invalid_json", "the body is not JSON (UTF-8): %s, at byte %d", err.text,
                                  err.position);
                return NULL;
        }
        if (!json_is_object(j)) {
                json_decref(j);
                http_answer_error(r, 400, "invalid_json", "the body must be a JSON object");
                return NULL;
        }
        return j;
}

bool http_request_accepts(const HttpRequest *r, const char *content_type) {
        const char *accept = http_request_header(r, MHD_HTTP_HEADER_ACCEPT), *at, *json;

        if (!accept || !(at = strcasestr(accept, content_type)))
                return false;
        json = strcasestr(accept, "application/json");
        return !json || at < json;
}

/* ---- Control requests ---- */

static void call_on_notify(void *userdata, const RpcMessage *m) {
        HttpRequest *r = userdata;

        if (r->call_notify)
                r->call_notify(r, m);
}

static void call_on_done(void *userdata, const RpcMessage *m, int error) {
        HttpRequest *r = userdata;
        HttpCallDone done = r->call_done;

        r->upstream = NULL;
        r->call_done = NULL;
        r->call_notify = NULL;
        done(r, m, error);
}

void http_call(HttpRequest *r, const char *method, json_t *params, HttpCallNotify on_notify, HttpCallDone on_done) {
        static const UpstreamCallbacks cb = { .on_notify = call_on_notify, .on_done = call_on_done };
        int e;

        assert(!r->upstream);
        r->call_notify = on_notify;
        r->call_done = on_done;
        e = upstream_call(r->server->loop, r->server->config->control_socket, method, params, &cb, r, &r->upstream);
        if (e < 0)
                http_answer_error(r, e == -E2BIG ? 413 : 500, e == -E2BIG ? "too_large" : "internal",
                                  e == -E2BIG ? "the request is longer than the control protocol's %d bytes"
                                              : "cannot make the control request (%d)",
                                  e == -E2BIG ? PROTOCOL_MAX_LINE : e);
}

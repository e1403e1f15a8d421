/* kernelsup-http's server: libmicrohttpd on our libuv loop (doc/design.md, section 11), one MHD daemon per
 * listening socket, each watched through its epoll fd. It owns the connections, checks who asks (auth.h), bounds
 * what comes in, and hands each whole request to a route of the table it is given; a route answers at once or
 * later (after its control requests, upstream.h), with one JSON body or with a stream of bounded memory.
 *
 * Ownership: a route's HttpRequest lives until its connection ends or its answer is sent, whichever comes last; the
 * route never frees it. What a route hangs on it (http_request_set_data) is freed with it, and its control
 * requests (http_call) are cancelled then: the daemon sees their connections close. Nothing re-enters: every
 * callback of this file comes from the loop. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "auth.h"
#include "listen.h"
#include "macro.h"
#include "protocol.h"

typedef struct HttpServer HttpServer;
typedef struct HttpRequest HttpRequest;

/* A route: method and a path pattern whose "*" segments match one segment each (percent-decoded, never "", "."
 * or "..", never holding '/' or NUL), handed to fn in order. */
typedef void (*HttpRouteFn)(HttpRequest *r, char **args);
typedef struct HttpRoute {
        const char *method;
        const char *pattern; /* "/v1/contexts/ * /execute", without the spaces */
        HttpRouteFn fn;
} HttpRoute;

typedef struct HttpLimits {
        size_t max_body;          /* bytes of a request's body */
        size_t header_pool;       /* MHD's memory per connection: the request line and headers must fit */
        unsigned max_connections; /* in all */
        unsigned max_per_client;  /* per client address */
        unsigned request_timeout; /* seconds for a request to arrive whole (from the connection's start or its
                                   * previous answer), and for a connection to sit idle */
        size_t stream_buffer;     /* bytes a response stream holds for a slow reader before it stops reading the
                                   * daemon */
} HttpLimits;

typedef struct HttpConfig {
        const char *control_socket;
        AuthPolicy auth;
        HttpLimits limits;
        const HttpRoute *routes;
        size_t n_routes;
} HttpConfig;

/* Serves config (borrowed: it must outlive the server) on the listeners (their fds are taken). -errno. */
int http_server_new(uv_loop_t *loop, const HttpConfig *config, Listener *listeners, size_t n, HttpServer **ret);
/* Ends every request and connection and frees the server; on_done when its handles are closed. */
void http_server_free(HttpServer *s, void (*on_done)(void *userdata), void *userdata);

/* ---- What a route reads ---- */
const char *http_request_method(const HttpRequest *r);
const char *http_request_header(const HttpRequest *r, const char *name);
/* A query argument, percent-decoded; NULL when absent. */
const char *http_request_query(const HttpRequest *r, const char *key);
/* The body as a JSON object ("" or absent: an empty object), or NULL after answering 400 (or 415 for a
 * Content-Type that is not JSON). New reference. */
json_t *http_request_json(HttpRequest *r);
/* Whether the client asked for content_type first among what it accepts over application/json. */
bool http_request_accepts(const HttpRequest *r, const char *content_type);
uv_loop_t *http_request_loop(const HttpRequest *r);
/* A route's own state, freed with free_fn when the request ends. */
void http_request_set_data(HttpRequest *r, void *data, void (*free_fn)(void *));
void *http_request_data(const HttpRequest *r);

/* ---- One answer ---- */
/* Answers with body (stolen; NULL: out of memory, 500) as application/json. */
void http_answer_json(HttpRequest *r, unsigned status, json_t *body);
/* Answers with no body (204, ...). */
void http_answer_empty(HttpRequest *r, unsigned status);
/* Answers {"error": {"code": code, "message": ...}}. */
_printf_(4, 5) void http_answer_error(HttpRequest *r, unsigned status, const char *code, const char *fmt, ...);
/* Answers a daemon's error reply (m->kind RPC_ERROR) with the status its code maps to (http_status_of_rpc), or an
 * upstream failure (m NULL, error -errno): 503 with Retry-After when the daemon is not there. */
void http_answer_upstream(HttpRequest *r, const RpcMessage *m, int error);
/* The HTTP status and error code of a daemon's JSON-RPC error code: 404 no such context or execution, 403, 409,
 * 504, 400, ... (kernelsup-http(8) lists them). */
unsigned http_status_of_rpc(int rpc_code, const char **ret_code);

/* ---- A control request bound to the request ---- */
/* Sends method with params (stolen) to the daemon; on_done and on_notify as upstream.h, with the request as
 * their userdata. Cancelled when the request ends first. A route whose call cannot even start is answered 500. */
typedef void (*HttpCallDone)(HttpRequest *r, const RpcMessage *m, int error);
typedef void (*HttpCallNotify)(HttpRequest *r, const RpcMessage *m);
void http_call(HttpRequest *r, const char *method, json_t *params, HttpCallNotify on_notify, HttpCallDone on_done);

/* ---- A stream ---- */
/* Begins a streamed answer (chunked) of content_type; keepalive, when not NULL, is written whenever nothing was
 * for keepalive_sec seconds (an SSE comment, an NDJSON line). 0 or -ENOMEM (answered 500 then). */
int http_stream_begin(HttpRequest *r, unsigned status, const char *content_type, const char *keepalive,
                      unsigned keepalive_sec);
/* Appends bytes. Above the stream's bound the control request of the stream is paused (http_call's), and resumed
 * once the reader took half of it; nothing is dropped. -ENOMEM. */
int http_stream_write(HttpRequest *r, const void *data, size_t len);
/* No more: the answer ends once the reader has taken what is buffered. */
void http_stream_end(HttpRequest *r);

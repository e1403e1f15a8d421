/* One request to kernelsupd's control socket, on the loop: the asynchronous counterpart of client_transact() for a
 * program that serves many callers at once. Each request has a connection of its own, so the daemon sees the
 * server's uid (SO_PEERCRED) and a caller that goes away closes exactly its request (for execute: the daemon's
 * on_disconnect applies). Nothing is kept between requests: a daemon that restarts is simply reached by the next. */
#pragma once

#include <jansson.h>
#include <uv.h>

#include "protocol.h"

typedef struct Upstream Upstream;

typedef struct UpstreamCallbacks {
        /* A notification before the reply; m is borrowed for the call. May call upstream_pause(). */
        void (*on_notify)(void *userdata, const RpcMessage *m);
        /* The end: the reply (m->kind RPC_RESULT or RPC_ERROR, borrowed for the call), or m NULL and error: -ENOENT
         * or -ECONNREFUSED (no daemon listens), -ECONNRESET (it went away before it answered), -EBADMSG (a line
         * that is no JSON-RPC message of ours), -E2BIG (a line over PROTOCOL_MAX_REPLY_LINE), -errno. The upstream
         * is gone after it returns. */
        void (*on_done)(void *userdata, const RpcMessage *m, int error);
} UpstreamCallbacks;

/* Connects to socket_path and sends method with params (stolen; NULL: none). 0 with *ret (may be NULL), and the
 * callbacks come later, never from inside this call; -ENOMEM, -E2BIG for a request over PROTOCOL_MAX_LINE. */
int upstream_call(uv_loop_t *loop, const char *socket_path, const char *method, json_t *params,
                  const UpstreamCallbacks *cb, void *userdata, Upstream **ret);

/* Stops and starts reading the daemon's answer (a slow reader downstream); the daemon's own bounds then apply. */
void upstream_pause(Upstream *u);
void upstream_resume(Upstream *u);

/* The caller goes away: closes the connection, and no callback comes. NULL: nothing. */
void upstream_cancel(Upstream *u);

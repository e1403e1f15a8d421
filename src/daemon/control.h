/* The control socket server: accepts connections on a Unix stream socket,
 * frames newline-delimited JSON-RPC, reads the peer's credentials and
 * dispatches requests to a method table. Handlers may answer at once or
 * later (a request stays open until replied to or cancelled). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "macro.h"

typedef struct ControlPeer {
        pid_t pid;
        uid_t uid;
        gid_t gid;
} ControlPeer;

typedef struct ControlRequest ControlRequest;

typedef void (*control_handler_t)(ControlRequest *req, json_t *params, void *userdata);

typedef struct ControlMethod {
        const char *name;
        control_handler_t handler;
        unsigned flags; /* reserved */
} ControlMethod;

const ControlPeer *control_request_peer(const ControlRequest *req);
const char *control_request_method(const ControlRequest *req);

/* Each request is answered exactly once, by one of these two, which free it.
 * result is stolen. */
void control_request_reply(ControlRequest *req, json_t *result);
void control_request_error(ControlRequest *req, int code, json_t *data, const char *fmt, ...) _printf_(4, 5);

/* What the request may leave unread on its connection (its streamed
 * notifications and its reply), beyond a fixed 16 MiB, before a peer that
 * does not read is disconnected. The connection keeps the largest value any
 * of its requests asked for. A peer that reads slowly is never disconnected
 * for that: while 1 MiB is unread its further requests wait. */
void control_request_allow_queue(ControlRequest *req, size_t bytes);

/* Sends a notification on the request's connection before the reply
 * (streamed output). params is stolen. -EPIPE when the peer is gone. */
int control_request_notify(ControlRequest *req, const char *method, json_t *params);

/* When the peer disconnects before the reply, cancel(req, data) runs and
 * then the request is freed; the handler must not answer it afterwards.
 * Without a cancel callback the request is simply dropped with the peer:
 * it stays valid until its handler answers, and that answer goes nowhere.
 * Cancel callbacks run from the loop or from control_server_close(), never
 * from inside control_request_reply/error/notify. */
void control_request_set_cancel(ControlRequest *req, void (*cancel)(ControlRequest *req, void *data), void *data);

typedef struct ControlServer ControlServer;

/* Who may connect to a socket the server binds: its mode (permission bits), and its owner and group when not
 * (uid_t) -1 and (gid_t) -1. */
typedef struct ControlSocketAccess {
        mode_t mode;
        uid_t uid;
        gid_t gid;
} ControlSocketAccess;

/* Listens on listen_fd when >= 0 (a socket systemd passed, already bound and
 * listening, whose mode and owner are the unit's: access is not applied), else
 * binds path (removing a stale socket nobody answers on; refusing, with
 * -EADDRINUSE, one that a live daemon answers on) and gives it access's mode,
 * owner and group before it listens. methods must outlive the server.
 * listen_fd stays the caller's: the server listens on a duplicate (an fd
 * that is not a Unix stream socket: -ENOTSOCK or -EPROTOTYPE). A path that
 * holds something other than a socket: -EEXIST. The process must ignore
 * SIGPIPE (libuv writes with write(2)); a vanished peer is then dropped. */
int control_server_new(uv_loop_t *loop, const char *path, int listen_fd, const ControlSocketAccess *access,
                       const ControlMethod *methods, size_t n_methods, void *userdata, ControlServer **ret);

/* Limits, so that no peer can lock root out: 256 connections in all, of which
 * the last 32 only for root and the daemon's own uid, and 64 at most per other
 * uid (a peer over a limit gets one error line and is closed). A connection
 * with no request open must complete a request line within the idle timeout
 * (5 s) or it is closed with an error line; one waiting for an answer is not
 * idle. Tests may set another timeout (msec; 0: the default). */
void control_server_set_idle_timeout(ControlServer *s, uint64_t msec);

/* How long a peer with replies unwritten may go without taking any piece of
 * them (a reply is written in pieces of 64 KiB) before it is closed: 60 s;
 * tests may set another (msec; 0: the default). */
void control_server_set_write_stall(ControlServer *s, uint64_t msec);

/* The connections open now (metrics). */
size_t control_server_connections(const ControlServer *s);

/* Stops listening, removes the socket file it bound (not a passed fd's),
 * cancels open requests and closes every connection. Frees itself after the
 * last uv_close callback. */
void control_server_close(ControlServer *s);

/* The control socket server: one uv_pipe_t listener, one uv_pipe_t per
 * client, newline-delimited JSON-RPC framed here and encoded by protocol.c.
 *
 * Lifetimes: a ControlConnection holds one reference for its uv handle
 * (dropped in the close callback) and one per open ControlRequest, so a
 * handler that answers after the peer went away still finds its connection
 * (closed: the answer is dropped). The server counts its open uv handles
 * (listener, connections, refused connections) and frees itself after the
 * last close callback. */

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control-private.h"
#include "control.h"
#include "log.h"
#include "macro.h"
#include "protocol.h"

/* A line is written in pieces of this size, each its own uv_write, so that
 * the write-stall clock restarts at each piece the peer takes: a reader that
 * keeps taking a long reply, however slowly, keeps it. */
#define CONTROL_WRITE_PIECE (64 * 1024)

/* One encoded line, shared by the writes of its pieces; the last frees it. */
typedef struct WriteLine {
        char *data;
        size_t n_pieces;
} WriteLine;

typedef struct WriteReq {
        uv_write_t req; /* first, so the uv_write_t * is the WriteReq * */
        WriteLine *line;
} WriteReq;

static void conn_close(ControlConnection *c, bool cancel_now);
static void conn_idle_start(ControlConnection *c);

static void server_free(ControlServer *s) {
        if (!s)
                return;
        free(s->path);
        free(s);
}

static void server_freep(ControlServer **s) {
        server_free(*s);
}

static void server_handle_closed(ControlServer *s) {
        if (--s->n_handles == 0)
                server_free(s);
}

static void conn_unref(ControlConnection *c) {
        if (--c->n_ref > 0)
                return;
        free(c->rbuf);
        free(c->line);
        free(c);
}

static bool peer_privileged(const ControlServer *s, uid_t uid) {
        return uid == 0 || uid == s->own_uid;
}

/* A request answered gives its weight back; a lot of it freed goes back to the system. */
static void request_unhold(ControlConnection *c, ControlRequest *req) {
        ControlServer *s = c->server;

        c->n_open--;
        c->held -= req->weight;
        if (!s)
                return;
        if (!peer_privileged(s, c->peer.uid))
                s->held_others -= req->weight;
        s->freed += req->weight;
}

static void server_maybe_trim(ControlServer *s) {
        if (!s || s->freed < CONTROL_TRIM_AFTER)
                return;
        s->freed = 0;
        (void) malloc_trim(0);
}

static void request_free(ControlRequest *req) {
        ControlConnection *c = req->conn;
        ControlServer *s = c->server;

        LIST_REMOVE(c->requests, req);
        request_unhold(c, req);
        json_decref(req->root);
        free(req);
        server_maybe_trim(s);
        /* Answered: the next request line must come within the idle timeout. */
        if (!c->requests && c->server && !c->closing)
                conn_idle_start(c);
        conn_unref(c);
}

/* Runs the cancel callback of every open request that has one and frees
 * those requests. A callback may answer or free other requests of this
 * connection, so the list is searched anew after each one. Requests without
 * a callback stay until their handler answers; the answer is dropped. */
static void conn_cancel_requests(ControlConnection *c) {
        for (;;) {
                ControlRequest *req;
                void (*cancel)(ControlRequest * req, void *data);

                for (req = c->requests; req; req = req->next)
                        if (req->cancel)
                                break;
                if (!req)
                        return;
                cancel = req->cancel;
                req->cancel = NULL;
                cancel(req, req->cancel_data);
                request_free(req);
        }
}

static void conn_close_cb(uv_handle_t *handle) {
        ControlConnection *c = handle->data;
        ControlServer *s = c->server;

        /* A close that started inside a write (see conn_send) cancels here,
         * from the loop, never under the feet of a running handler. */
        conn_cancel_requests(c);
        /* Requests still open are answered into the void later: they no longer count here. */
        if (!peer_privileged(s, c->peer.uid))
                s->held_others -= c->held;
        s->freed += c->held;
        LIST_REMOVE(s->connections, c);
        s->n_connections--;
        if (c->evicted)
                s->n_evicting--;
        s->limit_logged = false;
        c->server = NULL;
        free(c->rbuf);
        c->rbuf = NULL;
        free(c->line);
        c->line = NULL;
        c->line_len = c->line_alloc = 0;
        conn_unref(c);
        server_maybe_trim(s);
        server_handle_closed(s);
}

/* Closes a connection. cancel_now: run the cancel callbacks at once, which
 * is allowed only when no handler of this connection is running (from a
 * loop callback or control_server_close); otherwise they run from the close
 * callback. */
static void conn_close(ControlConnection *c, bool cancel_now) {
        if (!c->closing) {
                c->closing = true;
                (void) uv_read_stop((uv_stream_t *) &c->pipe);
        }
        if (cancel_now)
                conn_cancel_requests(c);
        if (!uv_is_closing((uv_handle_t *) &c->pipe))
                uv_close((uv_handle_t *) &c->pipe, conn_close_cb);
}

static void conn_shutdown_cb(uv_shutdown_t *req, int status) {
        ControlConnection *c = req->handle->data;

        conn_close(c, true);
}

/* Closes a connection after what was written to it reached the peer, so a
 * last error reply is not lost. Called from the read callback only. */
static void conn_close_after_flush(ControlConnection *c) {
        int r;

        if (uv_is_closing((uv_handle_t *) &c->pipe) || c->shutting_down)
                return;
        c->closing = true;
        (void) uv_read_stop((uv_stream_t *) &c->pipe);
        conn_cancel_requests(c);
        r = uv_shutdown(&c->shutdown, (uv_stream_t *) &c->pipe, conn_shutdown_cb);
        if (r < 0) {
                conn_close(c, true);
                return;
        }
        c->shutting_down = true;
        /* A peer that does not read its last error keeps the flush from ending: bound it. */
        conn_idle_start(c);
}

static void conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);

/* The peer read enough of what we sent: take its next requests again. */
static void conn_maybe_resume(ControlConnection *c) {
        if (!c->read_paused || c->closing ||
            uv_stream_get_write_queue_size((uv_stream_t *) &c->pipe) > CONTROL_READ_PAUSE / 4)
                return;
        c->read_paused = false;
        if (uv_read_start((uv_stream_t *) &c->pipe, conn_alloc_cb, conn_read_cb) < 0)
                conn_close(c, true);
}

static void conn_write_cb(uv_write_t *req, int status) {
        WriteReq *w = (WriteReq *) req;
        ControlConnection *c = req->handle->data;

        if (--w->line->n_pieces == 0) {
                free(w->line->data);
                free(w->line);
        }
        free(w);
        if (status == 0) {
                /* The peer is reading what we sent: with no request open, that is not idleness, and a slow
                 * reader of a long reply must not be cut off by the idle timeout. One that stops reading makes
                 * no more progress, and the deadline then runs out. */
                if (c->idle_deadline != 0 && !c->closing)
                        conn_idle_start(c);
                conn_maybe_resume(c);
                return;
        }
        if (status == UV_ECANCELED)
                return;
        /* A peer that went away is not worth a warning. */
        if (status == UV_EPIPE || status == UV_ECONNRESET)
                log_debug("Control peer (pid %d) went away before reading its reply.", (int) c->peer.pid);
        else
                log_warning_errno(status, "Failed to write to control peer (pid %d): %m", (int) c->peer.pid);
        conn_close(c, true);
}

/* Flow control after a write was queued. A peer that reads slowly makes us
 * stop reading its further requests (backpressure; what one request sends is
 * bounded by its handler, an exec's output by output_limit); only a peer
 * that leaves more than the bound unread is disconnected. */
static int conn_flow(ControlConnection *c) {
        size_t queued = uv_stream_get_write_queue_size((uv_stream_t *) &c->pipe);

        if (queued > CONTROL_MAX_WRITE_QUEUE && queued - CONTROL_MAX_WRITE_QUEUE > c->write_allowance) {
                log_warning("Control peer (pid %d) leaves %zu bytes of replies unread, closing its connection.",
                            (int) c->peer.pid, queued);
                conn_close(c, false);
                return -EPIPE;
        }
        if (queued > CONTROL_READ_PAUSE && !c->read_paused) {
                c->read_paused = true;
                (void) uv_read_stop((uv_stream_t *) &c->pipe);
        }
        return 0;
}

/* Queues one encoded line (taken; NULL means out of memory). A connection
 * being closed drops it with -EPIPE. May close the connection, but leaves the
 * cancel callbacks to the close callback, because a handler may be running. */
static int conn_send(ControlConnection *c, char *line) {
        _cleanup_free_ char *data = line;
        WriteLine *wl;
        size_t len, off;
        int r = 0;

        if (!data)
                return -ENOMEM;
        if (c->closing)
                return -EPIPE;
        wl = malloc(sizeof *wl);
        if (!wl)
                return -ENOMEM;
        len = strlen(data);
        *wl = (WriteLine){ .data = TAKE_PTR(data), .n_pieces = 1 }; /* held until every piece is queued */
        for (off = 0; off < len && r >= 0; off += CONTROL_WRITE_PIECE) {
                WriteReq *w = malloc(sizeof *w);
                uv_buf_t buf =
                        uv_buf_init(wl->data + off,
                                    (unsigned) (len - off < CONTROL_WRITE_PIECE ? len - off : CONTROL_WRITE_PIECE));

                r = w ? 0 : -ENOMEM;
                if (w) {
                        *w = (WriteReq){ .line = wl };
                        r = uv_write(&w->req, (uv_stream_t *) &c->pipe, &buf, 1, conn_write_cb);
                        if (r >= 0)
                                wl->n_pieces++;
                        else
                                free(w);
                }
        }
        if (--wl->n_pieces == 0) {
                free(wl->data);
                free(wl);
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to write to control peer (pid %d): %m", (int) c->peer.pid);
                conn_close(c, false);
                return r;
        }
        return conn_flow(c);
}

/* Sends a line for a request: an internal error when encoding failed, and
 * closes the connection if even that cannot be encoded. */
static void request_send(ControlRequest *req, char *line) {
        ControlConnection *c = req->conn;

        if (!line)
                line = protocol_error(req->id, RPC_INTERNAL_ERROR, "out of memory", NULL);
        if (!line) {
                log_warning("Out of memory encoding a reply to control peer (pid %d), closing.", (int) c->peer.pid);
                conn_close(c, false);
                return;
        }
        (void) conn_send(c, line);
}

static bool request_wants_answer(const ControlRequest *req) {
        return req->id && !req->conn->closing;
}

const ControlPeer *control_request_peer(const ControlRequest *req) {
        return &req->conn->peer;
}

const char *control_request_method(const ControlRequest *req) {
        return req->method;
}

void control_request_allow_queue(ControlRequest *req, size_t bytes) {
        if (bytes > req->conn->write_allowance)
                req->conn->write_allowance = bytes;
}

void control_request_reply(ControlRequest *req, json_t *result) {
        json_auto_t *r = result;

        if (request_wants_answer(req))
                request_send(req, protocol_result(req->id, TAKE_PTR(r)));
        request_free(req);
}

void control_request_error(ControlRequest *req, int code, json_t *data, const char *fmt, ...) {
        json_auto_t *d = data;
        _cleanup_free_ char *message = NULL;
        va_list ap;

        if (request_wants_answer(req)) {
                va_start(ap, fmt);
                if (vasprintf(&message, fmt, ap) < 0)
                        message = NULL;
                va_end(ap);
                if (message)
                        request_send(req, protocol_error(req->id, code, message, TAKE_PTR(d)));
                else
                        request_send(req, NULL);
        }
        request_free(req);
}

int control_request_notify(ControlRequest *req, const char *method, json_t *params) {
        json_auto_t *p = params;

        if (req->conn->closing)
                return -EPIPE;
        return conn_send(req->conn, protocol_notification(method, TAKE_PTR(p)));
}

void control_request_set_cancel(ControlRequest *req, void (*cancel)(ControlRequest *req, void *data), void *data) {
        req->cancel = cancel;
        req->cancel_data = data;
}

static const ControlMethod *server_find_method(const ControlServer *s, const char *name) {
        for (size_t i = 0; i < s->n_methods; i++)
                if (streq(s->methods[i].name, name))
                        return &s->methods[i];
        return NULL;
}

static bool line_is_blank(const char *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!strchr(" \t\r", p[i]) || p[i] == '\0')
                        return false;
        return true;
}

/* Whether a request of this weight may be held open on c; if not, why (for
 * the peer, naming the cap). */
static bool conn_may_hold(const ControlConnection *c, size_t weight, char *why, size_t size) {
        const ControlServer *s = c->server;
        size_t uid_held = 0;

        if (c->n_open >= CONTROL_MAX_OPEN_PER_CONN) {
                snprintf(why, size, "too many requests open on this connection (at most %d)",
                         CONTROL_MAX_OPEN_PER_CONN);
                return false;
        }
        if (c->held + weight > CONTROL_MAX_HELD_PER_CONN) {
                snprintf(why, size, "too many bytes of requests open on this connection (at most %d MiB)",
                         CONTROL_MAX_HELD_PER_CONN >> 20);
                return false;
        }
        if (weight <= CONTROL_SMALL_REQUEST + CONTROL_REQUEST_OVERHEAD)
                return true;
        for (const ControlConnection *o = s->connections; o; o = o->next)
                if (o->peer.uid == c->peer.uid)
                        uid_held += o->held;
        if (uid_held + weight > CONTROL_MAX_HELD_PER_UID) {
                snprintf(why, size, "too many bytes of requests open for uid %u (at most %d MiB)",
                         (unsigned) c->peer.uid, CONTROL_MAX_HELD_PER_UID >> 20);
                return false;
        }
        if (!peer_privileged(s, c->peer.uid) && s->held_others + weight > CONTROL_MAX_HELD_OTHERS) {
                snprintf(why, size, "too many bytes of requests open for all users (at most %d MiB)",
                         CONTROL_MAX_HELD_OTHERS >> 20);
                return false;
        }
        return true;
}

static void conn_handle_line(ControlConnection *c, const char *line, size_t len) {
        ControlServer *s = c->server;
        const ControlMethod *m;
        ControlRequest *req;
        RpcRequest rpc;
        json_auto_t *root = NULL;
        json_t *id = NULL;
        const char *message = NULL;
        char why[128];
        size_t weight;
        int code = RPC_INVALID_REQUEST;
        int r;

        /* An empty line is no request; tolerate it as whitespace between requests. */
        if (line_is_blank(line, len))
                return;

        r = protocol_parse_request(line, len, &rpc, &code, &message, &root, &id);
        if (r == -EBADMSG) {
                log_debug("Malformed control request from pid %d: %s.", (int) c->peer.pid, message);
                (void) conn_send(c, protocol_error(id, code, message, NULL));
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to parse control request from pid %d: %m", (int) c->peer.pid);
                (void) conn_send(c, protocol_error(NULL, RPC_INTERNAL_ERROR, "out of memory", NULL));
                return;
        }

        m = server_find_method(s, rpc.method);
        if (!m) {
                _cleanup_free_ char *text = NULL;

                log_debug("Unknown control method \"%.64s\" from pid %d.", rpc.method, (int) c->peer.pid);
                /* JSON-RPC never answers a notification, not even with an error. */
                if (rpc.id) {
                        if (asprintf(&text, "unknown method \"%.64s\"", rpc.method) < 0)
                                text = NULL;
                        (void) conn_send(c,
                                         protocol_error(rpc.id, RPC_METHOD_NOT_FOUND, text ?: "unknown method", NULL));
                }
                json_decref(rpc.root);
                return;
        }

        weight = len + CONTROL_REQUEST_OVERHEAD;
        if (!conn_may_hold(c, weight, why, sizeof why)) {
                log_debug("Refusing a control request from pid %d: %s.", (int) c->peer.pid, why);
                if (rpc.id)
                        (void) conn_send(c, protocol_error(rpc.id, KS_ERR_FAILED, why, NULL));
                json_decref(rpc.root);
                return;
        }
        req = calloc(1, sizeof *req);
        if (!req) {
                log_warning("Out of memory for a control request from pid %d.", (int) c->peer.pid);
                if (rpc.id)
                        (void) conn_send(c, protocol_error(rpc.id, RPC_INTERNAL_ERROR, "out of memory", NULL));
                json_decref(rpc.root);
                return;
        }
        *req = (ControlRequest){
                .conn = c,
                .root = rpc.root,
                .id = rpc.id,
                .method = rpc.method,
                .weight = weight,
        };
        c->n_open++;
        c->held += weight;
        if (!peer_privileged(s, c->peer.uid))
                s->held_others += weight;
        c->n_ref++;
        LIST_PREPEND(c->requests, req);
        /* Waiting for an answer is not idle, however long it takes. */
        c->idle_deadline = 0;
        /* The handler may answer (and so free req) before it returns. */
        m->handler(req, rpc.params, s->userdata);
}

/* Sends one error line only if it goes out at once: never queued behind a peer
 * that does not read, because the connection is closed right after. */
static void conn_try_send_error(ControlConnection *c, int code, const char *message) {
        _cleanup_free_ char *line = NULL;
        uv_buf_t buf;

        if (c->closing || uv_stream_get_write_queue_size((uv_stream_t *) &c->pipe) > 0)
                return;
        line = protocol_error(NULL, code, message, NULL);
        if (!line)
                return;
        buf = uv_buf_init(line, (unsigned) strlen(line));
        (void) uv_try_write((uv_stream_t *) &c->pipe, &buf, 1);
}

static void server_idle_cb(uv_timer_t *t);

/* Starts (or restarts) the connection's idle clock: a complete request line
 * must come within the server's idle timeout. While replies are still being
 * written, the clock is the longer CONTROL_WRITE_STALL_MSEC, restarted at each
 * write the peer takes: a slow reader, or one paused by its pager, keeps its
 * reply; one that stops reading for good is closed. */
static void conn_idle_start(ControlConnection *c) {
        ControlServer *s = c->server;
        uint64_t timeout = s->idle_timeout;

        if (uv_stream_get_write_queue_size((uv_stream_t *) &c->pipe) > 0 && timeout < s->write_stall)
                timeout = s->write_stall;
        c->idle_deadline = uv_now(s->loop) + timeout;
        c->idle_grace = false;
        /* Deadlines only grow, so one armed already comes first, unless the timeout was shortened since. */
        if (!uv_is_active((uv_handle_t *) &s->idle_timer) || uv_timer_get_due_in(&s->idle_timer) > s->idle_timeout)
                uv_timer_start(&s->idle_timer, server_idle_cb, s->idle_timeout, 0);
}

static bool conn_bytes_unread(ControlConnection *c) {
        uv_os_fd_t fd;
        int n = 0;

        return uv_fileno((uv_handle_t *) &c->pipe, &fd) == 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* The deadline passed. Bytes still unread may be a request that came in time
 * while the loop was busy elsewhere (a long reload): they get one more loop
 * iteration to be read, once. Otherwise the connection is closed. */
static void conn_idle_expire(ControlConnection *c, uint64_t now) {
        char message[96];

        if (!c->closing && !c->idle_grace && conn_bytes_unread(c)) {
                c->idle_grace = true;
                /* Not 0: libuv would run a timer due now again before polling. */
                c->idle_deadline = now + 1;
                return;
        }
        log_debug("Control peer (pid %d, uid %u) sent no complete request within %.1f s, closing.", (int) c->peer.pid,
                  (unsigned) c->peer.uid, c->server->idle_timeout / 1000.0);
        snprintf(message, sizeof message, "idle timeout: no complete request within %.1f s",
                 c->server->idle_timeout / 1000.0);
        conn_try_send_error(c, KS_ERR_TIMEOUT, message);
        c->idle_deadline = 0;
        conn_close(c, true);
}

/* Closes the connections whose idle deadline passed and arms the timer for
 * the next one. Closing does not change the list (that happens in the close
 * callbacks), so it can be walked as is. */
static void server_idle_cb(uv_timer_t *t) {
        ControlServer *s = t->data;
        uint64_t now = uv_now(s->loop), next = 0;

        for (ControlConnection *c = s->connections; c; c = c->next) {
                if (c->idle_deadline == 0 || uv_is_closing((uv_handle_t *) &c->pipe))
                        continue;
                if (c->idle_deadline <= now)
                        conn_idle_expire(c, now);
                if (c->idle_deadline > 0 && (next == 0 || c->idle_deadline < next))
                        next = c->idle_deadline;
        }
        if (next > 0)
                uv_timer_start(&s->idle_timer, server_idle_cb, next - now, 0);
}

static void conn_too_long(ControlConnection *c) {
        log_debug("Control request from pid %d is longer than %d bytes, closing.", (int) c->peer.pid,
                  PROTOCOL_MAX_LINE);
        (void) conn_send(c, protocol_error(NULL, RPC_INVALID_REQUEST, "request too long", NULL));
        free(c->line);
        c->line = NULL;
        c->line_len = c->line_alloc = 0;
        conn_close_after_flush(c);
}

static int conn_line_append(ControlConnection *c, const char *p, size_t n) {
        if (c->line_len + n > c->line_alloc) {
                size_t a = c->line_alloc ? c->line_alloc : 4096;
                char *b;

                while (a < c->line_len + n)
                        a *= 2;
                if (a > PROTOCOL_MAX_LINE)
                        a = PROTOCOL_MAX_LINE;
                b = realloc(c->line, a);
                if (!b)
                        return -ENOMEM;
                c->line = b;
                c->line_alloc = a;
        }
        memcpy(c->line + c->line_len, p, n);
        c->line_len += n;
        return 0;
}

static void conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
        ControlConnection *c = handle->data;

        if (!c->rbuf)
                c->rbuf = malloc(CONTROL_READ_SIZE);
        /* A zero-length buffer makes libuv report UV_ENOBUFS to the read callback. */
        *buf = uv_buf_init(c->rbuf, c->rbuf ? CONTROL_READ_SIZE : 0);
}

static void conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
        ControlConnection *c = stream->data;
        const char *p, *end;

        if (nread < 0) {
                if (nread == UV_EOF || nread == UV_ECONNRESET)
                        log_debug("Control peer (pid %d) disconnected.", (int) c->peer.pid);
                else
                        log_warning_errno((int) nread, "Failed to read from control peer (pid %d): %m",
                                          (int) c->peer.pid);
                conn_close(c, true);
                return;
        }

        p = buf->base;
        end = p + nread;
        while (p < end && !c->closing) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t n = (size_t) ((nl ? nl : end) - p);

                /* Refuse as soon as the line is too long, without waiting for its end. */
                if (c->line_len + n > PROTOCOL_MAX_LINE) {
                        conn_too_long(c);
                        return;
                }
                if (!nl || c->line_len > 0) {
                        if (conn_line_append(c, p, n) < 0) {
                                log_warning("Out of memory reading from control peer (pid %d), closing.",
                                            (int) c->peer.pid);
                                conn_close(c, true);
                                return;
                        }
                        if (!nl)
                                return;
                        conn_handle_line(c, c->line, c->line_len);
                        c->line_len = 0;
                        /* Give back what one long request needed. */
                        if (c->line_alloc > CONTROL_READ_SIZE) {
                                free(c->line);
                                c->line = NULL;
                                c->line_alloc = 0;
                        }
                } else
                        conn_handle_line(c, p, n);
                p = nl + 1;
        }
}

static void reject_close_cb(uv_handle_t *handle) {
        ControlServer *s = handle->data;

        free(handle);
        server_handle_closed(s);
}

/* Accepts a connection we have no memory for and closes it at once. */
static void server_reject(ControlServer *s) {
        uv_pipe_t *p;

        p = malloc(sizeof *p);
        if (!p)
                return;
        (void) uv_pipe_init(s->loop, p, 0);
        p->data = s;
        s->n_handles++;
        (void) uv_accept((uv_stream_t *) &s->pipe, (uv_stream_t *) p);
        uv_close((uv_handle_t *) p, reject_close_cb);
}

/* Whether one more connection of uid fits the limits; if not, why (for the peer). */
static bool server_admits(const ControlServer *s, uid_t uid, char *why, size_t size) {
        size_t mine = 0;

        if (s->n_connections - s->n_evicting >= CONTROL_MAX_CONNECTIONS) {
                snprintf(why, size, "too many connections");
                return false;
        }
        if (peer_privileged(s, uid))
                return true;
        if (s->n_connections - s->n_evicting >= CONTROL_MAX_CONNECTIONS - CONTROL_RESERVED) {
                snprintf(why, size, "too many connections: the last %d of %d are kept for root", CONTROL_RESERVED,
                         CONTROL_MAX_CONNECTIONS);
                return false;
        }
        for (const ControlConnection *c = s->connections; c; c = c->next)
                mine += c->peer.uid == uid;
        if (mine >= CONTROL_MAX_PER_UID) {
                snprintf(why, size, "too many connections from uid %u (at most %d)", (unsigned) uid,
                         CONTROL_MAX_PER_UID);
                return false;
        }
        return true;
}

/* Root (or our uid) finds every slot taken: if some of them are its own idle connections (no request open,
 * nothing left to write: a pool of a root client), the oldest of them is closed with an error line saying
 * why, so root's own client never locks root out. Its slot counts until its close callback, so the newcomer
 * is admitted beyond the limit by one meanwhile; connections waiting for an answer are never closed. */
static void server_make_room(ControlServer *s, uid_t uid) {
        ControlConnection *oldest = NULL;

        for (ControlConnection *c = s->connections; c; c = c->next)
                if (c->peer.uid == uid && !c->requests && !c->closing && !uv_is_closing((uv_handle_t *) &c->pipe) &&
                    uv_stream_get_write_queue_size((uv_stream_t *) &c->pipe) == 0)
                        oldest = c; /* the list is newest first */
        if (!oldest)
                return;
        log_debug("Closing the oldest idle control connection of uid %u (pid %d) to admit a new one.", (unsigned) uid,
                  (int) oldest->peer.pid);
        conn_try_send_error(oldest, KS_ERR_FAILED,
                            "too many connections: closed, the oldest idle one of its uid, to admit a newer one");
        oldest->evicted = true;
        s->n_evicting++;
        conn_close(oldest, true);
}

/* A connection that was accepted but not admitted: never in the list, no requests. */
static void conn_refused_close_cb(uv_handle_t *handle) {
        ControlConnection *c = handle->data;
        ControlServer *s = c->server;

        free(c);
        server_handle_closed(s);
}

static void conn_refuse(ControlConnection *c, const char *why) {
        if (why)
                conn_try_send_error(c, KS_ERR_FAILED, why);
        uv_close((uv_handle_t *) &c->pipe, conn_refused_close_cb);
}

static int conn_read_peer(ControlConnection *c) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        uv_os_fd_t fd;
        int r;

        r = uv_fileno((uv_handle_t *) &c->pipe, &fd);
        if (r < 0)
                return r;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        c->peer = (ControlPeer){ .pid = cred.pid, .uid = cred.uid, .gid = cred.gid };
        return 0;
}

/* Accepts, reads the peer's credentials, then admits the connection within
 * the limits (which depend on the uid) or refuses it with an error line. */
static void server_connection_cb(uv_stream_t *listener, int status) {
        ControlServer *s = listener->data;
        ControlConnection *c;
        char why[128];
        int r;

        if (status < 0) {
                log_warning_errno(status, "Failed to accept a control connection: %m");
                return;
        }
        c = calloc(1, sizeof *c);
        if (!c) {
                log_warning("Out of memory accepting a control connection.");
                server_reject(s);
                return;
        }
        (void) uv_pipe_init(s->loop, &c->pipe, 0);
        c->pipe.data = c;
        c->server = s;
        c->n_ref = 1;
        c->peer = (ControlPeer){ .pid = 0, .uid = (uid_t) -1, .gid = (gid_t) -1 };
        s->n_handles++;

        r = uv_accept(listener, (uv_stream_t *) &c->pipe);
        if (r < 0) {
                log_warning_errno(r, "Failed to accept a control connection: %m");
                return conn_refuse(c, NULL);
        }
        r = conn_read_peer(c);
        if (r < 0) {
                /* Without credentials we cannot tell what the peer may see: refuse it. */
                log_warning_errno(r, "Failed to read the credentials of a control peer: %m");
                return conn_refuse(c, NULL);
        }
        if (s->n_connections - s->n_evicting >= CONTROL_MAX_CONNECTIONS && peer_privileged(s, c->peer.uid))
                server_make_room(s, c->peer.uid);
        if (!server_admits(s, c->peer.uid, why, sizeof why)) {
                if (!s->limit_logged)
                        log_event(LOG_WARNING,
                                  &(LogEvent){
                                          .message_id = LOG_ID_CONNECTION_REFUSED, .reason = why, .pid = c->peer.pid },
                                  "Refusing control connections (pid %d, uid %u): %s.", (int) c->peer.pid,
                                  (unsigned) c->peer.uid, why);
                s->limit_logged = true;
                return conn_refuse(c, why);
        }
        LIST_PREPEND(s->connections, c);
        s->n_connections++;
        log_debug("Control connection from pid %d, uid %u.", (int) c->peer.pid, (unsigned) c->peer.uid);

        conn_idle_start(c);
        r = uv_read_start((uv_stream_t *) &c->pipe, conn_alloc_cb, conn_read_cb);
        if (r < 0) {
                log_warning_errno(r, "Failed to read from control peer (pid %d): %m", (int) c->peer.pid);
                conn_close(c, true);
        }
}

static void server_listener_close_cb(uv_handle_t *handle) {
        server_handle_closed(handle->data);
}

/* Removes the socket file only if it is still the one we bound, not one a
 * newer daemon put there. */
static void server_unlink_socket(ControlServer *s) {
        struct stat st;

        if (!s->path)
                return;
        if (lstat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
                (void) unlink(s->path);
        free(s->path);
        s->path = NULL;
}

int control_server_new(uv_loop_t *loop, const char *path, int listen_fd, const ControlSocketAccess *access,
                       const ControlMethod *methods, size_t n_methods, void *userdata, ControlServer **ret) {
        _cleanup_(server_freep) ControlServer *s = NULL;
        _cleanup_close_ int fd = -1;
        struct stat st = {};
        int r;

        if (!loop || !ret || (n_methods > 0 && !methods) || (listen_fd < 0 && (!path || !access)))
                return -EINVAL;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (ControlServer){
                .loop = loop,
                .methods = methods,
                .n_methods = n_methods,
                .userdata = userdata,
                .idle_timeout = CONTROL_IDLE_TIMEOUT_MSEC,
                .write_stall = CONTROL_WRITE_STALL_MSEC,
                .own_uid = getuid(),
        };

        if (listen_fd >= 0) {
                r = control_socket_dup_passed(listen_fd, &fd);
                if (r < 0)
                        return r;
        } else {
                s->path = strdup(path);
                if (!s->path)
                        return -ENOMEM;
                r = control_socket_bind(path, access, &fd, &st);
                if (r < 0)
                        return r;
                s->dev = st.st_dev;
                s->ino = st.st_ino;
        }

        r = uv_pipe_init(loop, &s->pipe, 0);
        if (r < 0)
                goto fail_unlink;
        s->pipe.data = s;
        s->n_handles = 1;
        r = uv_pipe_open(&s->pipe, fd);
        if (r < 0)
                goto fail_close;
        TAKE_FD(fd);
        r = uv_listen((uv_stream_t *) &s->pipe, CONTROL_BACKLOG, server_connection_cb);
        if (r < 0)
                goto fail_close;
        (void) uv_timer_init(loop, &s->idle_timer);
        s->idle_timer.data = s;
        s->n_handles++;

        *ret = TAKE_PTR(s);
        return 0;

fail_close:
        /* From here the handle frees the server in its close callback. */
        server_unlink_socket(s);
        uv_close((uv_handle_t *) &s->pipe, server_listener_close_cb);
        TAKE_PTR(s);
        return r;
fail_unlink:
        server_unlink_socket(s);
        return r;
}

void control_server_close(ControlServer *s) {
        if (!s || s->closing)
                return;
        s->closing = true;
        server_unlink_socket(s);
        uv_close((uv_handle_t *) &s->pipe, server_listener_close_cb);
        uv_close((uv_handle_t *) &s->idle_timer, server_listener_close_cb);
        /* Connections leave the list only in their close callbacks, so it is stable here. */
        for (ControlConnection *c = s->connections, *next; c; c = next) {
                next = c->next;
                conn_close(c, true);
        }
}

void control_server_set_idle_timeout(ControlServer *s, uint64_t msec) {
        s->idle_timeout = msec > 0 ? msec : CONTROL_IDLE_TIMEOUT_MSEC;
}

void control_server_set_write_stall(ControlServer *s, uint64_t msec) {
        s->write_stall = msec > 0 ? msec : CONTROL_WRITE_STALL_MSEC;
}

size_t control_server_connections(const ControlServer *s) {
        return s->n_connections;
}

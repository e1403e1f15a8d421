/* The MHD daemons on the loop, their connections, and each request from its headers to its end (http.h). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "http-private.h"
#include "log.h"
#include "route.h"

static void handle_closed(uv_handle_t *h) {
        HttpServer *s = h->data;

        if (--s->open_handles == 0 && s->freeing) {
                void (*on_done)(void *) = s->on_done;
                void *userdata = s->done_userdata;

                free(s->sockets);
                free(s);
                if (on_done)
                        on_done(userdata);
        }
}

/* ---- Running MHD ---- */

static void socket_run(ServerSocket *ss);

static void on_mhd_timer(uv_timer_t *t) {
        socket_run(t->data);
}

static void on_mhd_poll(uv_poll_t *p, int status, int events) {
        (void) status, (void) events;
        socket_run(p->data);
}

/* Lets MHD do what is due, then waits for its epoll fd or its next timeout. */
static void socket_run(ServerSocket *ss) {
        MHD_UNSIGNED_LONG_LONG ms;

        if (!ss->mhd)
                return;
        (void) MHD_run(ss->mhd);
        if (MHD_get_timeout(ss->mhd, &ms) == MHD_YES)
                uv_timer_start(&ss->timer, on_mhd_timer, ms, 0);
        else
                uv_timer_stop(&ss->timer);
}

/* ---- Requests ---- */

static void on_gone(uv_poll_t *p, int status, int events) {
        HttpRequest *r = p->data;

        (void) status, (void) events;
        uv_poll_stop(p);
        r->client_gone = true;
        request_resume(r);
}

static void gone_closed(uv_handle_t *h) {
        free(h);
}

void request_suspend(HttpRequest *r) {
        if (r->suspended || r->ended)
                return;
        MHD_suspend_connection(r->mhd);
        r->suspended = true;
        /* A suspended connection does not see its client leave; this does. */
        if (!r->gone) {
                r->gone = calloc(1, sizeof *r->gone);
                if (r->gone && uv_poll_init_socket(r->server->loop, r->gone, r->conn->fd) < 0) {
                        free(r->gone);
                        r->gone = NULL;
                }
                if (r->gone)
                        r->gone->data = r;
        }
        if (r->gone)
                (void) uv_poll_start(r->gone, UV_DISCONNECT, on_gone);
}

void request_resume(HttpRequest *r) {
        if (!r->suspended)
                return;
        r->suspended = false;
        if (r->gone)
                uv_poll_stop(r->gone);
        MHD_resume_connection(r->mhd);
        /* MHD takes up a resumed connection in its next run: one comes at once. */
        uv_timer_start(&r->sock->timer, on_mhd_timer, 0, 0);
}

static void request_free(HttpRequest *r) {
        HttpServer *s = r->server;

        r->ended = true;
        if (r->prev)
                r->prev->next = r->next;
        else
                s->requests = r->next;
        if (r->next)
                r->next->prev = r->prev;
        upstream_cancel(r->upstream);
        if (r->data_free)
                r->data_free(r->data);
        if (r->response && !r->queued)
                MHD_destroy_response(r->response);
        if (r->gone)
                uv_close((uv_handle_t *) r->gone, gone_closed);
        stream_done(r);
        free(r->method);
        free(r->path);
        free(r->body);
        free(r);
}

static HttpRequest *request_new(ServerSocket *ss, struct MHD_Connection *c, const char *url, const char *method) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpServer *s = ss->server;
        HttpRequest *r = calloc(1, sizeof *r);

        if (!r)
                return NULL;
        r->server = s;
        r->sock = ss;
        r->mhd = c;
        r->conn = ci ? ci->socket_context : NULL;
        r->method = strdup(method);
        r->path = strdup(url);
        if (!r->conn || !r->method || !r->path) {
                free(r->method);
                free(r->path);
                free(r);
                return NULL;
        }
        r->next = s->requests;
        if (r->next)
                r->next->prev = r;
        s->requests = r;
        return r;
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        unsigned *n = cls;

        (void) kind, (void) value;
        if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
                (*n)++;
        return MHD_YES;
}

/* The checks on the headers alone: who asks, and whether the framing and size may be served. false after
 * answering. */
static bool request_admit(HttpRequest *r) {
        const HttpConfig *cfg = r->server->config;
        const char *te = http_request_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        const char *cl = http_request_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned n_cl = 0;
        unsigned long long len;

        if (!r->conn->peer_allowed) {
                http_answer_error(r, 403, "forbidden", "this socket serves only root and the server's own uid");
                return false;
        }
        (void) MHD_get_connection_values(r->mhd, MHD_HEADER_KIND, count_header, &n_cl);
        /* A proxy in front would read the framing one way and us another (request smuggling). */
        if ((te && cl) || n_cl > 1) {
                http_answer_error(r, 400, "bad_request",
                                  "a request may not give both Transfer-Encoding and Content-Length, or two "
                                  "Content-Lengths");
                return false;
        }
        if (cl && (parse_uint(cl, 0, UINT64_MAX, &len) < 0 || len > cfg->limits.max_body)) {
                http_answer_error(r, 413, "too_large", "the body may have at most %zu bytes", cfg->limits.max_body);
                return false;
        }
        if (r->sock->listener.kind == LISTEN_TCP && !auth_host_allowed(&cfg->auth, http_request_header(r, "Host"))) {
                http_answer_error(r, 403, "forbidden",
                                  "the Host header does not name this server (start it with --allow-host NAME)");
                return false;
        }
        if (!auth_origin_allowed(&cfg->auth, http_request_header(r, "Origin"))) {
                http_answer_error(r, 403, "forbidden",
                                  "requests from this Origin are not allowed (start it with --allow-origin ORIGIN)");
                return false;
        }
        if (r->sock->listener.kind == LISTEN_TCP && cfg->auth.token &&
            !auth_offered_token_ok(http_request_header(r, MHD_HTTP_HEADER_AUTHORIZATION),
                                   http_request_header(r, "X-Access-Token"),
                                   http_request_header(r, "E2B-Traffic-Access-Token"), http_request_query(r, "token"),
                                   cfg->auth.token)) {
                http_answer_error(r, 401, "unauthorized", "a valid token is required");
                if (r->response)
                        (void) MHD_add_response_header(r->response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
                return false;
        }
        return true;
}

static bool request_take_body(HttpRequest *r, const char *data, size_t size) {
        size_t max = r->server->config->limits.max_body;
        char *b;

        if (size > max - r->body_len) {
                http_answer_error(r, 413, "too_large", "the body may have at most %zu bytes", max);
                return false;
        }
        b = realloc(r->body, r->body_len + size + 1);
        if (!b) {
                http_answer_error(r, 500, "internal", "out of memory");
                return false;
        }
        memcpy(b + r->body_len, data, size);
        r->body = b;
        r->body_len += size;
        r->body[r->body_len] = '\0';
        return true;
}

static void request_dispatch(HttpRequest *r) {
        const HttpConfig *cfg = r->server->config;
        char *args[ROUTE_MAX_ARGS + 1];
        bool path_known = false;
        int m;

        r->conn->waiting_since = 0;
        for (size_t i = 0; i < cfg->n_routes; i++) {
                m = route_match(cfg->routes[i].pattern, r->path, args);
                if (m < 0)
                        return http_answer_error(r, 500, "internal", "out of memory");
                if (m == 0)
                        continue;
                if (!streq(cfg->routes[i].method, r->method)) {
                        route_args_free(args);
                        path_known = true;
                        continue;
                }
                cfg->routes[i].fn(r, args);
                route_args_free(args);
                return;
        }
        if (path_known)
                return http_answer_error(r, 405, "method_not_allowed", "%s is not allowed on %s", r->method, r->path);
        http_answer_error(r, 404, "not_found", "no such route: %s", r->path);
}

static enum MHD_Result queue_answer(HttpRequest *r) {
        enum MHD_Result q;

        if (r->failed || r->client_gone)
                return MHD_NO;
        q = MHD_queue_response(r->mhd, r->status, r->response);
        MHD_destroy_response(r->response);
        r->queued = true;
        return q;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        HttpRequest *r = *con_cls;

        (void) version;
        if (!r) {
                r = request_new(cls, c, url, method);
                if (!r)
                        return MHD_NO;
                *con_cls = r;
                /* Answered at once only when refused (MHD then closes the connection, the body unread); an
                 * answer in this first call would close every connection (doc/design.md, section 11). */
                return request_admit(r) ? MHD_YES : queue_answer(r);
        }
        if (r->queued)
                return MHD_YES;
        if (*upload_size) {
                size_t n = *upload_size;
                *upload_size = 0;
                return request_take_body(r, upload, n) ? MHD_YES : queue_answer(r);
        }
        if (r->client_gone)
                return MHD_NO;
        if (!r->dispatched) {
                r->dispatched = true;
                request_dispatch(r);
        }
        if (r->response || r->failed)
                return queue_answer(r);
        request_suspend(r);
        return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        HttpRequest *r = *con_cls;

        (void) cls, (void) c, (void) toe;
        if (!r)
                return;
        *con_cls = NULL;
        r->conn->waiting_since = now_usec(CLOCK_MONOTONIC);
        request_free(r);
}

/* ---- Connections ---- */

static size_t route_unescape_mhd(void *cls, struct MHD_Connection *c, char *s) {
        (void) cls, (void) c;
        return route_unescape(s);
}

static bool peer_allowed(int fd) {
        struct ucred cred;
        socklen_t len = sizeof cred;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return false;
        return cred.uid == 0 || cred.uid == getuid();
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
        ServerSocket *ss = cls;
        HttpServer *s = ss->server;
        const union MHD_ConnectionInfo *ci;
        Conn *conn = *socket_context;
        int one = 1;

        if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
                if (!conn)
                        return;
                if (conn->prev)
                        conn->prev->next = conn->next;
                else
                        s->conns = conn->next;
                if (conn->next)
                        conn->next->prev = conn->prev;
                free(conn);
                *socket_context = NULL;
                return;
        }
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn = calloc(1, sizeof *conn);
        if (!conn || !ci) {
                free(conn);
                return; /* request_new refuses it: no socket context */
        }
        conn->sock = ss;
        conn->fd = ci->connect_fd;
        conn->waiting_since = now_usec(CLOCK_MONOTONIC);
        if (ss->listener.kind == LISTEN_TCP) {
                /* Nagle against the client's delayed ACK costs ~40 ms a round trip (doc/design.md, section 11). */
                (void) setsockopt(conn->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                conn->peer_allowed = true;
        } else
                conn->peer_allowed = peer_allowed(conn->fd);
        conn->next = s->conns;
        if (conn->next)
                conn->next->prev = conn;
        s->conns = conn;
        *socket_context = conn;
}

/* A connection that brings no whole request in time (slowloris) is shut down; MHD then closes it. */
static void on_tick(uv_timer_t *t) {
        HttpServer *s = t->data;
        usec_t now = now_usec(CLOCK_MONOTONIC), deadline = s->config->limits.request_timeout * USEC_PER_SEC;

        for (Conn *c = s->conns; c; c = c->next)
                if (c->waiting_since && now - c->waiting_since > deadline)
                        (void) shutdown(c->fd, SHUT_RDWR);
        for (HttpRequest *r = s->requests; r; r = r->next)
                stream_tick(r, now);
}

/* ---- The server ---- */

static int socket_start(HttpServer *s, ServerSocket *ss) {
        const HttpLimits *l = &s->config->limits;
        const union MHD_DaemonInfo *di;
        unsigned per_client = ss->listener.kind == LISTEN_TCP ? l->max_per_client : 0;
        int r;

        ss->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_access, ss,
                                   MHD_OPTION_LISTEN_SOCKET, ss->listener.fd, MHD_OPTION_NOTIFY_COMPLETED,
                                   on_completed, ss, MHD_OPTION_NOTIFY_CONNECTION, on_connection, ss,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, l->header_pool, MHD_OPTION_CONNECTION_LIMIT,
                                   l->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_client,
                                   MHD_OPTION_CONNECTION_TIMEOUT, l->request_timeout, MHD_OPTION_UNESCAPE_CALLBACK,
                                   route_unescape_mhd, NULL, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
        if (!ss->mhd)
                return -EINVAL;
        di = MHD_get_daemon_info(ss->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        if (!di)
                return -EINVAL;
        ss->server = s;
        r = uv_poll_init(s->loop, &ss->poll, di->epoll_fd);
        if (r < 0)
                return r;
        ss->poll.data = ss;
        s->open_handles++;
        (void) uv_timer_init(s->loop, &ss->timer);
        ss->timer.data = ss;
        s->open_handles++;
        r = uv_poll_start(&ss->poll, UV_READABLE, on_mhd_poll);
        if (r < 0)
                return r;
        socket_run(ss);
        return 0;
}

int http_server_new(uv_loop_t *loop, const HttpConfig *config, Listener *listeners, size_t n, HttpServer **ret) {
        HttpServer *s = calloc(1, sizeof *s);
        int r = 0;

        if (!s)
                return -ENOMEM;
        s->loop = loop;
        s->config = config;
        s->sockets = calloc(n, sizeof *s->sockets);
        if (!s->sockets) {
                free(s);
                return -ENOMEM;
        }
        (void) uv_timer_init(loop, &s->tick);
        s->tick.data = s;
        s->open_handles++;
        (void) uv_timer_start(&s->tick, on_tick, 1000, 1000);
        for (size_t i = 0; i < n && r >= 0; i++) {
                s->sockets[i].listener = listeners[i];
                s->sockets[i].server = s;
                s->n_sockets = i + 1;
                r = socket_start(s, &s->sockets[i]);
        }
        *ret = s; /* also on failure: http_server_free() releases what was started */
        return r;
}

void http_server_free(HttpServer *s, void (*on_done)(void *userdata), void *userdata) {
        s->on_done = on_done;
        s->done_userdata = userdata;
        s->freeing = true;
        /* MHD_stop_daemon with suspended connections is undefined: resume them first. */
        for (HttpRequest *r = s->requests; r; r = r->next) {
                r->client_gone = true;
                request_resume(r);
        }
        for (size_t i = 0; i < s->n_sockets; i++) {
                ServerSocket *ss = &s->sockets[i];
                if (ss->mhd) {
                        MHD_stop_daemon(ss->mhd);
                        ss->mhd = NULL;
                }
                /* MHD closed the listening socket. */
                if (ss->poll.data) {
                        ss->poll.data = s;
                        uv_close((uv_handle_t *) &ss->poll, handle_closed);
                }
                if (ss->timer.data) {
                        ss->timer.data = s;
                        uv_close((uv_handle_t *) &ss->timer, handle_closed);
                }
        }
        uv_close((uv_handle_t *) &s->tick, handle_closed);
}

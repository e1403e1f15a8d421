/* Tests for control.c with a real uv loop and real client sockets on a
 * temporary path: requests, the line limit, disconnects, a slow reader,
 * idle peers, the connection limit, socket paths and closing. */

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "log.h"
#include "protocol.h"
#include "tap.h"
#include "util.h"

/* ---- control.c ----------------------------------------------------------------------------------------- */

static uv_loop_t loop;
static int n_cancelled, n_late_answers;
static char tmpdir[] = "/tmp/test-protocol.XXXXXX";
/* What kernelsupd gives its socket by default (kernelsup.ini(5) socket_mode), no owner or group set. */
static const ControlSocketAccess access_default = { .mode = 0666, .uid = (uid_t) -1, .gid = (gid_t) -1 };

typedef struct Later {
        uv_timer_t timer;
        ControlRequest *req;
} Later;

static void later_free(uv_handle_t *h) {
        free(h->data);
}

static void later_fire(uv_timer_t *t) {
        Later *l = t->data;

        n_late_answers++;
        control_request_reply(l->req, json_string("later"));
        uv_close((uv_handle_t *) &l->timer, later_free);
}

static void later_cancel(ControlRequest *req, void *data) {
        Later *l = data;

        n_cancelled++;
        uv_timer_stop(&l->timer);
        uv_close((uv_handle_t *) &l->timer, later_free);
}

/* Answers from a timer after params.ms; "later" cancels on disconnect, "orphan" does not. */
static void later_start(ControlRequest *req, json_t *params, bool cancellable) {
        Later *l = calloc(1, sizeof *l);

        uv_timer_init(&loop, &l->timer);
        l->timer.data = l;
        l->req = req;
        if (cancellable)
                control_request_set_cancel(req, later_cancel, l);
        uv_timer_start(&l->timer, later_fire, (uint64_t) json_integer_value(json_object_get(params, "ms")), 0);
}

static void method_later(ControlRequest *req, json_t *params, void *userdata) {
        later_start(req, params, true);
}

static void method_orphan(ControlRequest *req, json_t *params, void *userdata) {
        later_start(req, params, false);
}

static void hold_cancel(ControlRequest *req, void *data) {
        n_cancelled++;
}

static void method_hold(ControlRequest *req, json_t *params, void *userdata) {
        control_request_set_cancel(req, hold_cancel, NULL);
}

static unsigned n_echo;

static void method_echo(ControlRequest *req, json_t *params, void *userdata) {
        n_echo++;
        control_request_reply(req, json_pack("{s:O,s:s,s:s}", "params", params, "method", control_request_method(req),
                                             "userdata", (const char *) userdata));
}

static void method_fail(ControlRequest *req, json_t *params, void *userdata) {
        control_request_error(req, KS_ERR_NO_CONTEXT, json_pack("{s:s}", "context", "nope"), "no such context: %s",
                              "nope");
}

static void method_stream(ControlRequest *req, json_t *params, void *userdata) {
        is_int(control_request_notify(req, "output", json_pack("{s:s}", "text", "one")), 0, "notify 1 queued");
        is_int(control_request_notify(req, "output", json_pack("{s:s}", "text", "two")), 0, "notify 2 queued");
        control_request_reply(req, json_true());
}

/* params {n, size, allow}: n notifications of size bytes at once, then a reply. */
static unsigned n_spewed, n_spew_refused;
static bool spew_ran;

static void method_spew(ControlRequest *req, json_t *params, void *userdata) {
        size_t size = (size_t) json_integer_value(json_object_get(params, "size"));
        json_int_t n = json_integer_value(json_object_get(params, "n"));
        _cleanup_free_ char *text = malloc(size + 1);

        if (json_integer_value(json_object_get(params, "allow")) > 0)
                control_request_allow_queue(req, (size_t) json_integer_value(json_object_get(params, "allow")));
        memset(text, 's', size);
        text[size] = '\0';
        n_spewed = n_spew_refused = 0;
        for (json_int_t i = 0; i < n; i++) {
                if (control_request_notify(req, "output", json_pack("{s:s}", "text", text)) == 0)
                        n_spewed++;
                else
                        n_spew_refused++;
        }
        spew_ran = true;
        control_request_reply(req, json_true());
}

static void method_peer(ControlRequest *req, json_t *params, void *userdata) {
        const ControlPeer *p = control_request_peer(req);

        control_request_reply(req, json_pack("{s:I,s:I,s:I}", "pid", (json_int_t) p->pid, "uid", (json_int_t) p->uid,
                                             "gid", (json_int_t) p->gid));
}

static const ControlMethod methods[] = {
        { "echo", method_echo, 0 }, { "later", method_later, 0 }, { "orphan", method_orphan, 0 },
        { "hold", method_hold, 0 }, { "fail", method_fail, 0 },   { "stream", method_stream, 0 },
        { "peer", method_peer, 0 }, { "spew", method_spew, 0 },
};

/* Runs the loop until fd is ready for events. Gives up after 30 s so that a
 * broken server fails the test instead of hanging it; nothing is timed. */
static bool pump_until(int fd, short events) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;

        for (;;) {
                struct pollfd p[2] = {
                        { .fd = fd, .events = events },
                        { .fd = uv_backend_fd(&loop), .events = POLLIN },
                };
                int t;

                uv_run(&loop, UV_RUN_NOWAIT);
                if (poll(p, 1, 0) > 0)
                        return true;
                if (now_usec(CLOCK_MONOTONIC) > deadline)
                        return false;
                t = uv_backend_timeout(&loop);
                if (t < 0 || t > 100)
                        t = 100;
                (void) poll(p, 2, t);
        }
}

/* A few loop iterations without waiting, for what is already pending. */
static void pump_briefly(void) {
        for (int i = 0; i < 10; i++)
                uv_run(&loop, UV_RUN_NOWAIT);
}

/* Runs the loop until *counter reaches want. */
static bool pump_until_count(const int *counter, int want) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;

        while (*counter < want) {
                struct pollfd p = { .fd = uv_backend_fd(&loop), .events = POLLIN };
                int t = uv_backend_timeout(&loop);

                if (now_usec(CLOCK_MONOTONIC) > deadline)
                        return false;
                (void) poll(&p, 1, t < 0 || t > 100 ? 100 : t);
                uv_run(&loop, UV_RUN_NOWAIT);
        }
        return true;
}

typedef struct Client {
        int fd;
        char *buf;
        size_t len, alloc;
        bool eof;
        int error; /* errno that ended the stream, 0 for a clean EOF */
} Client;

static void client_done(Client *c) {
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        *c = (Client){ .fd = -1 };
}

static int client_connect(const char *path, Client *ret) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret = (Client){ .fd = fd };
        return 0;
}

static int client_send(Client *c, const char *data, size_t len) {
        while (len > 0) {
                ssize_t k = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);

                if (k < 0) {
                        if (errno != EAGAIN)
                                return -errno;
                        if (!pump_until(c->fd, POLLOUT))
                                return -ETIMEDOUT;
                        continue;
                }
                data += k;
                len -= (size_t) k;
        }
        return 0;
}

static int client_send_str(Client *c, const char *s) {
        return client_send(c, s, strlen(s));
}

/* One line without its newline (caller frees), or NULL at the end of the stream. */
static char *client_read_line(Client *c) {
        for (;;) {
                char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
                ssize_t k;

                if (nl) {
                        size_t n = (size_t) (nl - c->buf);
                        char *line = malloc(n + 1);

                        memcpy(line, c->buf, n);
                        line[n] = '\0';
                        memmove(c->buf, nl + 1, c->len - n - 1);
                        c->len -= n + 1;
                        return line;
                }
                if (c->eof)
                        return NULL;
                if (!pump_until(c->fd, POLLIN)) {
                        c->eof = true;
                        c->error = ETIMEDOUT;
                        return NULL;
                }
                if (c->alloc - c->len < 65536) {
                        c->alloc = c->alloc * 2 + 65536;
                        c->buf = realloc(c->buf, c->alloc);
                }
                k = recv(c->fd, c->buf + c->len, c->alloc - c->len, MSG_DONTWAIT);
                if (k > 0)
                        c->len += (size_t) k;
                else if (k == 0)
                        c->eof = true;
                else if (errno != EAGAIN) {
                        c->eof = true;
                        c->error = errno;
                }
        }
}

/* Reads one message; false (and a diagnostic) at the end of the stream or on garbage. */
static bool client_read_message(Client *c, RpcMessage *m) {
        _cleanup_free_ char *line = client_read_line(c);

        if (!line) {
                printf("# stream ended: %s\n", c->error ? strerror(c->error) : "EOF");
                return false;
        }
        if (protocol_parse_message(line, strlen(line), m) < 0) {
                printf("# unparsable line: %.200s\n", line);
                return false;
        }
        return true;
}

/* True when the server has closed the connection: everything left is read and then EOF or a reset. */
static bool client_closed_by_server(Client *c) {
        char *line;

        while ((line = client_read_line(c)))
                free(line);
        return c->eof && (c->error == 0 || c->error == ECONNRESET);
}

static bool reply_is_result(const RpcMessage *m, long long id) {
        return m->kind == RPC_RESULT && json_is_integer(m->id) && json_integer_value(m->id) == id;
}

static bool reply_is_error(const RpcMessage *m, int code) {
        return m->kind == RPC_ERROR && m->code == code;
}

static bool client_echo_works(Client *c, long long id) {
        _cleanup_free_ char *req = protocol_request(id, "echo", json_pack("{s:I}", "n", (json_int_t) id));
        RpcMessage m;
        bool good;

        if (client_send_str(c, req) < 0 || !client_read_message(c, &m))
                return false;
        good = reply_is_result(&m, id) &&
               json_integer_value(json_object_get(json_object_get(m.result, "params"), "n")) == id;
        rpc_message_done(&m);
        return good;
}

static char *path_in_tmp(const char *name) {
        char *p;

        if (asprintf(&p, "%s/%s", tmpdir, name) < 0)
                abort();
        return p;
}

static void test_server_requests(ControlServer *s, const char *path) {
        Client c;
        RpcMessage m;
        struct stat st;
        _cleanup_free_ char *later = NULL, *echo = NULL, *both = NULL;

        ok(stat(path, &st) == 0 && S_ISSOCK(st.st_mode), "the socket file exists");
        is_int(st.st_mode & 07777, 0666, "socket file mode 0666, as asked");

        is_int(client_connect(path, &c), 0, "client connects");

        ok(client_echo_works(&c, 1), "a valid request gets its result");

        is_int(client_send_str(&c, "this is not json\n"), 0, "send garbage");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_PARSE_ERROR) && json_is_null(m.id),
           "garbage gets -32700 with a null id");
        rpc_message_done(&m);
        ok(client_echo_works(&c, 2), "the connection still works after garbage");

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n"), 0, "send unknown method");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_METHOD_NOT_FOUND) && json_integer_value(m.id) == 3 &&
                   strstr(m.message, "nope"),
           "unknown method gets -32601 with its id and name");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"echo\",\"params\":[1]}\n"), 0,
               "send params array");
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) && json_integer_value(m.id) == 4,
           "params array gets -32600 with its id");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"echo\"}\n"
                                   "{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}\n"
                                   "{\"jsonrpc\":\"2.0\",\"method\":\"fail\"}\n"
                                   "\n \r\n"
                                   "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"echo\"}\n"),
               0, "send notifications, blank lines, then a request");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 5),
           "notifications (even unknown or failing ones) and blank lines get no reply");
        rpc_message_done(&m);

        is_int(client_send_str(&c,
                               "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"echo\",\"params\":{\"k\":\"v\"}}\n"),
               0, "send a string id");
        ok(client_read_message(&c, &m) && m.kind == RPC_RESULT && json_is_string(m.id) &&
                   streq(json_string_value(m.id), "s"),
           "a string id comes back");
        is_str(json_string_value(json_object_get(json_object_get(m.result, "params"), "k")), "v",
               "the handler saw the params");
        is_str(json_string_value(json_object_get(m.result, "method")), "echo", "control_request_method");
        is_str(json_string_value(json_object_get(m.result, "userdata")), "ud", "the handler got the userdata");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"echo\"}\n"), 0, "send a null id");
        ok(client_read_message(&c, &m) && m.kind == RPC_RESULT && json_is_null(m.id),
           "a request with a null id is answered with a null id");
        rpc_message_done(&m);

        /* Two requests in one write: the later one is still pending when the echo is answered. */
        later = protocol_request(7, "later", json_pack("{s:i}", "ms", 1));
        echo = protocol_request(8, "echo", NULL);
        ok(asprintf(&both, "%s%s", later, echo) > 0, "two requests");
        is_int(client_send_str(&c, both), 0, "send later then echo");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 8), "the echo is answered while later is pending");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_result(&m, 7) && streq(json_string_value(m.result), "later"),
           "then later answers from its timer");
        rpc_message_done(&m);

        /* A request split over several writes. */
        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":9,"), 0, "send half a request");
        pump_briefly();
        is_int(client_send_str(&c, "\"method\":\"echo\"}\n"), 0, "send the other half");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 9), "a split request is answered");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"fail\"}\n"), 0, "send fail");
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_NO_CONTEXT) && json_integer_value(m.id) == 10,
           "a handler error keeps its code and id");
        is_str(m.message, "no such context: nope", "the formatted message");
        is_str(json_string_value(json_object_get(m.data, "context")), "nope", "the error data");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"stream\"}\n"), 0, "send stream");
        ok(client_read_message(&c, &m) && m.kind == RPC_NOTIFICATION && streq(m.method, "output") &&
                   streq(json_string_value(json_object_get(m.params, "text")), "one"),
           "first notification");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && m.kind == RPC_NOTIFICATION &&
                   streq(json_string_value(json_object_get(m.params, "text")), "two"),
           "second notification");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_result(&m, 11) && json_is_true(m.result), "then the reply");
        rpc_message_done(&m);

        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"peer\"}\n"), 0, "send peer");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 12), "peer answers");
        is_int(json_integer_value(json_object_get(m.result, "uid")), getuid(), "peer uid is getuid()");
        is_int(json_integer_value(json_object_get(m.result, "gid")), getgid(), "peer gid is getgid()");
        is_int(json_integer_value(json_object_get(m.result, "pid")), getpid(), "peer pid is getpid()");
        rpc_message_done(&m);

        client_done(&c);
}

/* A request of exactly PROTOCOL_MAX_LINE bytes passes; one byte more closes the connection. */
static void test_server_line_limit(const char *path) {
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"echo\",\"params\":{\"pad\":\"";
        static const char tail[] = "\"}}";
        size_t pad = PROTOCOL_MAX_LINE - (sizeof head - 1) - (sizeof tail - 1);
        _cleanup_free_ char *line = malloc(PROTOCOL_MAX_LINE + 2);
        _cleanup_free_ char *big = NULL;
        Client c;
        RpcMessage m;
        int r;

        memcpy(line, head, sizeof head - 1);
        memset(line + sizeof head - 1, 'x', pad);
        memcpy(line + sizeof head - 1 + pad, tail, sizeof tail - 1);
        line[PROTOCOL_MAX_LINE] = '\n';

        is_int(client_connect(path, &c), 0, "connect for the limit");
        is_int(client_send(&c, line, PROTOCOL_MAX_LINE + 1), 0, "send a request of exactly the maximum length");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 50) &&
                   strlen(json_string_value(json_object_get(json_object_get(m.result, "params"), "pad"))) == pad,
           "a request of exactly PROTOCOL_MAX_LINE bytes is served");
        rpc_message_done(&m);

        /* One byte more: pad with a space before the closing brace. */
        memmove(line + PROTOCOL_MAX_LINE - 1, line + PROTOCOL_MAX_LINE - 2, 2);
        line[PROTOCOL_MAX_LINE - 2] = ' ';
        line[PROTOCOL_MAX_LINE] = '}';
        line[PROTOCOL_MAX_LINE + 1] = '\n';
        r = client_send(&c, line, PROTOCOL_MAX_LINE + 2);
        ok(r == 0 || r == -EPIPE || r == -ECONNRESET, "send one byte over the maximum (%d)", r);
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) && json_is_null(m.id) &&
                   streq(m.message, "request too long"),
           "one byte over gets \"request too long\"");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and the connection is closed");
        client_done(&c);

        /* 300 KiB without any newline: refused before its end arrives. */
        big = malloc(300 * 1024);
        memset(big, 'a', 300 * 1024);
        is_int(client_connect(path, &c), 0, "connect for 300 KiB");
        r = client_send(&c, big, 300 * 1024);
        ok(r == 0 || r == -EPIPE || r == -ECONNRESET, "send 300 KiB (%d)", r);
        ok(client_read_message(&c, &m) && reply_is_error(&m, RPC_INVALID_REQUEST) &&
                   streq(m.message, "request too long"),
           "a 300 KiB line gets an error");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and a closed connection");
        client_done(&c);
}

static void test_server_disconnects(const char *path) {
        _cleanup_free_ char *later = protocol_request(20, "later", json_pack("{s:i}", "ms", 600000));
        _cleanup_free_ char *orphan = protocol_request(21, "orphan", json_pack("{s:i}", "ms", 1));
        _cleanup_free_ char *line = NULL;
        Client c;
        int answers;

        /* The peer leaves while "later" waits: cancel runs, the timer is stopped. */
        n_cancelled = 0;
        is_int(client_connect(path, &c), 0, "connect for disconnect");
        is_int(client_send_str(&c, later), 0, "send a pending request");
        client_done(&c);
        ok(pump_until_count(&n_cancelled, 1), "disconnect with a pending request fires cancel");
        is_int(n_cancelled, 1, "exactly once");

        /* Without a cancel callback the request lives on; its late answer is dropped. */
        answers = n_late_answers;
        is_int(client_connect(path, &c), 0, "connect for orphan");
        is_int(client_send_str(&c, orphan), 0, "send an orphan request");
        client_done(&c);
        ok(pump_until_count(&n_late_answers, answers + 1), "the orphan's handler answers after the peer left");

        /* The peer stops reading (SHUT_RD): the server's write fails with EPIPE and it drops the peer. */
        answers = n_late_answers;
        is_int(client_connect(path, &c), 0, "connect for EPIPE");
        is_int(client_send_str(&c, orphan), 0, "send an orphan request");
        pump_briefly();
        is_int(shutdown(c.fd, SHUT_RD), 0, "the client shuts its read side");
        ok(pump_until_count(&n_late_answers, answers + 1), "the answer is written into EPIPE");
        {
                usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;
                ssize_t k;

                /* A blank line is harmless to a live server; EPIPE shows it closed its end. */
                while ((k = send(c.fd, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL)) >= 0 &&
                       now_usec(CLOCK_MONOTONIC) < deadline)
                        pump_briefly();
                /* A close with unread data in its buffer may reach us as a reset rather than EPIPE. */
                ok(k < 0 && (errno == EPIPE || errno == ECONNRESET),
                   "the server closed the connection after EPIPE (send: %s)", k < 0 ? strerror(errno) : "ok");
        }
        client_done(&c);

        /* A partial line and then EOF: dropped without a reply or a crash. */
        is_int(client_connect(path, &c), 0, "connect for a partial line");
        is_int(client_send_str(&c, "{\"jsonrpc\":\"2.0\",\"id\":22,"), 0, "send a partial line");
        is_int(shutdown(c.fd, SHUT_WR), 0, "and EOF");
        line = client_read_line(&c);
        ok(!line && c.eof && c.error == 0, "the server closes without a reply");
        client_done(&c);
}

/* Sends a spew request and runs the loop until the server has handled it. */
static void spew(Client *c, int n, int size, long long allow) {
        _cleanup_free_ char *req = protocol_request(
                31, "spew", json_pack("{s:i, s:i, s:I}", "n", n, "size", size, "allow", (json_int_t) allow));

        spew_ran = false;
        is_int(client_send_str(c, req), 0, "send a spew request");
        while (!spew_ran && pump_until(c->fd, POLLIN))
                ;
}

/* Flow control: a peer that does not read gets backpressure (its further
 * requests wait), and is disconnected only past the bound on what it leaves
 * unread; a request's allowance raises that bound. */
static void test_server_slow_reader(const char *path) {
        _cleanup_free_ char *echo = protocol_request(32, "echo", json_object());
        unsigned before;
        char *line;
        int lines = 0;
        Client c;

        /* 100 notifications of 256 KiB: 25 MiB unread, over the 16 MiB bound. */
        is_int(client_connect(path, &c), 0, "connect a peer that does not read");
        spew(&c, 100, 256 * 1024, 0);
        ok(n_spew_refused > 0 && n_spewed < 100, "past 16 MiB unread the notifications are refused (%u queued)",
           n_spewed);
        ok(client_closed_by_server(&c), "and the connection closed");
        client_done(&c);

        /* The same with an allowance of 32 MiB: kept, and all of it arrives once the peer reads. */
        is_int(client_connect(path, &c), 0, "connect a slow reader");
        spew(&c, 100, 256 * 1024, 32 * 1024 * 1024);
        is_int(n_spewed, 100, "within the allowance every notification is queued");
        before = n_echo;
        is_int(client_send_str(&c, echo), 0, "send another request while 25 MiB are unread");
        for (int i = 0; i < 20; i++)
                uv_run(&loop, UV_RUN_NOWAIT);
        is_int(n_echo, before, "backpressure: the server does not read it yet");
        while ((line = client_read_line(&c))) {
                RpcMessage m;
                bool last = false;

                if (protocol_parse_message(line, strlen(line), &m) == 0) {
                        last = reply_is_result(&m, 32);
                        rpc_message_done(&m);
                }
                free(line);
                lines++;
                if (last)
                        break;
        }
        is_int(lines, 102, "the reader gets 100 notifications, the reply, then the other request's reply");
        is_int(n_echo, before + 1, "the other request was handled once the peer read");
        client_done(&c);
}

/* Reads c at about 16 KiB every 20 ms until the reply to id comes (true) or the
 * stream ends (false); keeps the loop running between reads. */
static bool client_read_slowly(Client *c, int id, size_t *ret_bytes) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 60 * USEC_PER_SEC;
        char buf[16384];

        *ret_bytes = 0;
        while (now_usec(CLOCK_MONOTONIC) < deadline) {
                char *line;
                ssize_t k;

                for (usec_t until = now_usec(CLOCK_MONOTONIC) + 20 * USEC_PER_MSEC; now_usec(CLOCK_MONOTONIC) < until;)
                        uv_run(&loop, UV_RUN_NOWAIT);
                k = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno != EAGAIN))
                        return false;
                if (k < 0)
                        continue;
                *ret_bytes += (size_t) k;
                if (c->len + (size_t) k > c->alloc) {
                        c->alloc = c->len + (size_t) k + 65536;
                        c->buf = realloc(c->buf, c->alloc);
                }
                memcpy(c->buf + c->len, buf, (size_t) k);
                c->len += (size_t) k;
                while (memchr(c->buf, '\n', c->len) && (line = client_read_line(c))) {
                        RpcMessage m;
                        bool last = false;

                        if (protocol_parse_message(line, strlen(line), &m) == 0) {
                                last = reply_is_result(&m, id);
                                rpc_message_done(&m);
                        }
                        free(line);
                        if (last)
                                return true;
                }
        }
        return false;
}

/* The write-stall clock, shortened here to 2 s (the idle timeout to 100 ms): a reader that keeps taking an 8 MiB
 * line at 16 KiB per 20 ms (10 s in all) keeps it, since the clock restarts at each 64 KiB piece it takes; one that
 * stops reading is closed. */
static void test_server_steady_reader(ControlServer *s, const char *path) {
        int rcvbuf = 4096;
        size_t got = 0;
        bool whole;
        Client c;

        control_server_set_write_stall(s, 2000);
        control_server_set_idle_timeout(s, 100); /* below the stall, as the defaults are */
        is_int(client_connect(path, &c), 0, "connect a steady slow reader");
        (void) setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        spew(&c, 1, 8 * 1024 * 1024, 0);
        whole = client_read_slowly(&c, 31, &got);
        ok(whole, "a reader taking 16 KiB each 20 ms gets the whole 8 MiB line and the reply (%zu bytes read)", got);
        client_done(&c);

        is_int(client_connect(path, &c), 0, "connect a reader that stops");
        (void) setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        spew(&c, 1, 2 * 1024 * 1024, 0);
        {
                usec_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;

                while (control_server_connections(s) > 0 && now_usec(CLOCK_MONOTONIC) < deadline) {
                        struct pollfd p = { .fd = uv_backend_fd(&loop), .events = POLLIN };

                        (void) poll(&p, 1, 50);
                        uv_run(&loop, UV_RUN_NOWAIT);
                }
        }
        is_int(control_server_connections(s), 0, "one that reads nothing more is closed after the write stall");
        client_done(&c);
        control_server_set_write_stall(s, 0);
        control_server_set_idle_timeout(s, 0);
}

/* The idle timeout, shortened here to 300 ms: a silent peer and one that trickles bytes are closed with an error
 * line; one that waits for an answer is not idle, and after the answer its clock runs again; a request that came in
 * time while the loop was busy is answered, not mistaken for silence. */
static void test_server_idle(ControlServer *s, const char *path) {
        _cleanup_free_ char *later = protocol_request(40, "later", json_pack("{s:i}", "ms", 1200));
        _cleanup_free_ char *echo = protocol_request(41, "echo", json_pack("{s:s}", "pad", "x"));
        const char *trickle =
                "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"echo\",\"params\":{\"pad\":\""
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}\n";
        size_t sent = 0;
        RpcMessage m = {}; /* rpc_message_done() zeroes it again, so a failed read leaves nothing to free */
        Client c;

        control_server_set_idle_timeout(s, 300);

        is_int(client_connect(path, &c), 0, "connect and send nothing");
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT) && json_is_null(m.id) &&
                   strstr(m.message, "idle timeout"),
           "a silent peer gets an idle timeout error");
        rpc_message_done(&m);
        ok(client_closed_by_server(&c), "and is closed");
        client_done(&c);

        /* One byte at a time, each within the timeout of the last: the whole line has one deadline. */
        is_int(client_connect(path, &c), 0, "connect a peer that trickles its request");
        while (trickle[sent] && client_send(&c, trickle + sent, 1) == 0) {
                struct pollfd p = { .fd = c.fd, .events = POLLIN };

                sent++;
                pump_briefly();
                if (poll(&p, 1, 100) > 0)
                        break;
        }
        ok(sent < strlen(trickle), "the trickling peer is cut off before its line is complete (%zu of %zu bytes)",
           sent, strlen(trickle));
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT), "with an idle timeout error");
        rpc_message_done(&m);
        client_done(&c);

        /* Waiting 1.2 s for an answer, four times the timeout, is not idle. */
        is_int(client_connect(path, &c), 0, "connect for a slow answer");
        is_int(client_send_str(&c, later), 0, "send a request answered after 1.2 s");
        ok(client_read_message(&c, &m) && reply_is_result(&m, 40), "the slow answer arrives on the open connection");
        rpc_message_done(&m);
        ok(client_read_message(&c, &m) && reply_is_error(&m, KS_ERR_TIMEOUT),
           "after the answer the clock runs again: idle timeout");
        rpc_message_done(&m);
        client_done(&c);

        /* The loop is blocked past the deadline while a complete request waits unread. */
        is_int(client_connect(path, &c), 0, "connect while the loop runs");
        pump_briefly();
        is_int(client_send_str(&c, echo), 0, "send a request");
        usleep(500 * 1000); /* the daemon busy elsewhere, not a wait for an event */
        ok(client_read_message(&c, &m) && reply_is_result(&m, 41),
           "a request that came in time is answered after the loop was blocked past the deadline");
        rpc_message_done(&m);
        client_done(&c);

        control_server_set_idle_timeout(s, 0);
}

static void test_server_connection_limit(const char *path) {
        Client clients[256], extra;
        RpcMessage m;
        struct rlimit rl;
        int n_ok = 0;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 600) {
                rl.rlim_cur = rl.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 600) {
                diag("RLIMIT_NOFILE too small for 257 connections, skipping the limit test");
                return;
        }

        /* An echo on each makes sure the server has accepted it before the next connects. */
        for (int i = 0; i < 256; i++)
                if (client_connect(path, &clients[i]) == 0 && client_echo_works(&clients[i], 100 + i))
                        n_ok++;
        is_int(n_ok, 256, "256 connections are served");

        /* All idle and of our own uid: a newcomer of that uid closes the oldest of them, not itself. */
        is_int(client_connect(path, &extra), 0, "a 257th of the same uid connects while the others are idle");
        ok(client_echo_works(&extra, 97), "and is served");
        ok(client_read_message(&clients[0], &m) && reply_is_error(&m, KS_ERR_FAILED) &&
                   strstr(m.message, "closed, the oldest idle one of its uid"),
           "the oldest idle connection is told why it is closed");
        rpc_message_done(&m);
        ok(client_closed_by_server(&clients[0]), "and is closed");
        client_done(&clients[0]);
        clients[0] = extra;

        /* All busy (a request open on each): a newcomer is refused. */
        n_ok = 0;
        for (int i = 0; i < 256; i++) {
                _cleanup_free_ char *hold = protocol_request(400 + i, "hold", json_object());

                n_ok += client_send_str(&clients[i], hold) == 0;
        }
        ok(n_ok == 256 && client_echo_works(&clients[255], 96), "a request held open on each of the 256");

        is_int(client_connect(path, &extra), 0, "the 257th connects");
        ok(client_read_message(&extra, &m) && reply_is_error(&m, KS_ERR_FAILED) && json_is_null(m.id) &&
                   streq(m.message, "too many connections"),
           "the 257th gets an error line");
        rpc_message_done(&m);
        ok(client_closed_by_server(&extra), "and is closed");
        client_done(&extra);

        /* Once one leaves (its EOF is seen together with the echo on another), there is room again. */
        client_done(&clients[0]);
        ok(client_echo_works(&clients[1], 99), "the others still work");
        is_int(client_connect(path, &extra), 0, "connect again after one left");
        ok(client_echo_works(&extra, 98), "served again below the limit");
        client_done(&extra);

        for (int i = 1; i < 256; i++)
                client_done(&clients[i]);
        /* Let the server see those EOFs (all ready at once, so one iteration) before the next test. */
        pump_briefly();
}

static void test_server_paths(const char *path) {
        _cleanup_free_ char *file = path_in_tmp("regular"), *stale = path_in_tmp("stale.sock");
        _cleanup_free_ char *passed = path_in_tmp("passed.sock");
        char longpath[200];
        ControlServer *s = NULL;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        Client c;
        int fd, pipefd[2], dgram;

        is_int(control_server_new(&loop, path, -1, &access_default, methods, ELEMENTSOF(methods), NULL, &s),
               -EADDRINUSE, "a second server on a live socket gets -EADDRINUSE");
        ok(s == NULL, "and no server");
        is_int(client_connect(path, &c), 0, "the first server still listens");
        ok(client_echo_works(&c, 60), "and still answers");
        client_done(&c);

        fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ok(fd >= 0, "create a regular file");
        close(fd);
        is_int(control_server_new(&loop, file, -1, &access_default, methods, ELEMENTSOF(methods), NULL, &s), -EEXIST,
               "a regular file at the path gets -EEXIST");
        ok(stat(file, &st) == 0 && S_ISREG(st.st_mode), "and the file is left alone");

        memset(longpath, 'l', sizeof longpath - 1);
        longpath[0] = '/';
        longpath[sizeof longpath - 1] = '\0';
        is_int(control_server_new(&loop, longpath, -1, &access_default, methods, ELEMENTSOF(methods), NULL, &s),
               -ENAMETOOLONG, "a path longer than sun_path gets -ENAMETOOLONG");
        is_int(control_server_new(&loop, NULL, -1, &access_default, methods, ELEMENTSOF(methods), NULL, &s), -EINVAL,
               "neither path nor fd gets -EINVAL");

        /* A stale socket: bound, never listened on, closed. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strncpy(sa.sun_path, stale, sizeof sa.sun_path - 1);
        ok(bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0, "bind a socket that nobody listens on");
        close(fd);
        is_int(control_server_new(&loop, stale, -1,
                                  &(ControlSocketAccess){ .mode = 0640, .uid = (uid_t) -1, .gid = getgid() }, methods,
                                  ELEMENTSOF(methods), (void *) "ud", &s),
               0, "a stale socket file is replaced");
        ok(stat(stale, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0640 && st.st_gid == getgid(),
           "the new socket has the mode and the group asked for (0640)");
        is_int(client_connect(stale, &c), 0, "connect to the replacement");
        ok(client_echo_works(&c, 61), "the replacement answers");
        client_done(&c);
        control_server_close(s);
        ok(stat(stale, &st) < 0 && errno == ENOENT, "closing removes the socket file it bound");

        /* A socket passed in, as systemd would. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strncpy(sa.sun_path, passed, sizeof sa.sun_path - 1);
        ok(bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0 && listen(fd, 16) == 0, "a listening socket to pass");
        is_int(control_server_new(&loop, NULL, fd, &access_default, methods, ELEMENTSOF(methods), (void *) "ud", &s),
               0, "a passed listening fd is served");
        is_int(client_connect(passed, &c), 0, "connect to the passed socket");
        ok(client_echo_works(&c, 62), "the passed socket answers");
        client_done(&c);
        control_server_close(s);
        pump_briefly();
        ok(stat(passed, &st) == 0 && S_ISSOCK(st.st_mode), "a passed socket's file is not removed");
        ok(fcntl(fd, F_GETFD) >= 0, "the caller's fd stays open");
        close(fd);
        unlink(passed);

        ok(pipe2(pipefd, O_CLOEXEC) == 0, "a pipe");
        is_int(control_server_new(&loop, NULL, pipefd[0], &access_default, methods, ELEMENTSOF(methods), NULL, &s),
               -ENOTSOCK, "a passed fd that is no socket gets -ENOTSOCK");
        close(pipefd[0]);
        close(pipefd[1]);
        dgram = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        is_int(control_server_new(&loop, NULL, dgram, &access_default, methods, ELEMENTSOF(methods), NULL, &s),
               -EPROTOTYPE, "a passed datagram socket gets -EPROTOTYPE");
        close(dgram);
        unlink(file);
}

static void test_server_close(ControlServer *s, const char *path) {
        _cleanup_free_ char *hold = protocol_request(40, "hold", NULL);
        _cleanup_free_ char *orphan_later = protocol_request(42, "orphan", json_pack("{s:i}", "ms", 50));
        Client c;
        struct stat st;
        int answers = n_late_answers;

        is_int(client_connect(path, &c), 0, "connect before closing the server");
        is_int(client_send_str(&c, hold), 0, "a request that never answers");
        is_int(client_send_str(&c, orphan_later), 0, "and one without cancel");
        ok(client_echo_works(&c, 43), "the server has read them");
        n_cancelled = 0;
        control_server_close(s);
        is_int(n_cancelled, 1, "control_server_close cancels open requests at once");
        ok(stat(path, &st) < 0 && errno == ENOENT, "and removes its socket file");
        ok(client_closed_by_server(&c), "and closes every connection");
        client_done(&c);
        ok(pump_until_count(&n_late_answers, answers + 1), "a request without cancel answers after the close");
}

static void test_server(void) {
        _cleanup_free_ char *path = NULL;
        ControlServer *s = NULL;

        if (!mkdtemp(tmpdir)) {
                ok(false, "mkdtemp: %s", strerror(errno));
                return;
        }
        path = path_in_tmp("control.sock");
        is_int(uv_loop_init(&loop), 0, "uv_loop_init");
        is_int(control_server_new(&loop, path, -1, &access_default, methods, ELEMENTSOF(methods), (void *) "ud", &s),
               0, "control_server_new binds a fresh path");

        test_server_requests(s, path);
        test_server_line_limit(path);
        test_server_disconnects(path);
        test_server_slow_reader(path);
        test_server_steady_reader(s, path);
        test_server_idle(s, path);
        test_server_connection_limit(path);
        test_server_paths(path);
        test_server_close(s, path);

        is_int(uv_run(&loop, UV_RUN_DEFAULT), 0, "the loop runs dry");
        is_int(uv_loop_close(&loop), 0, "uv_loop_close() == 0: every handle was closed");
        ok(rmdir(tmpdir) == 0, "the temporary directory is empty");
}

int main(void) {
        /* As kernelsupd does: a vanished peer must be an EPIPE, not a signal. */
        signal(SIGPIPE, SIG_IGN);
        /* Every log statement runs, so the sanitizers see their formats. */
        log_max_level = LOG_DEBUG;

        test_server();
        return tap_done();
}

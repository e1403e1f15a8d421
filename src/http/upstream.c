/* The control requests of upstream.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "upstream.h"

struct Upstream {
        uv_pipe_t pipe;
        uv_connect_t connect;
        uv_write_t write;
        char *request; /* the line sent */
        char *buf;     /* what came and is not a whole line yet */
        size_t len, alloc;
        bool connected, reading, paused, done, closing;
        UpstreamCallbacks cb;
        void *userdata;
};

static void on_closed(uv_handle_t *h) {
        Upstream *u = h->data;

        free(u->request);
        free(u->buf);
        free(u);
}

static void upstream_close(Upstream *u) {
        if (u->closing)
                return;
        u->closing = true;
        uv_close((uv_handle_t *) &u->pipe, on_closed);
}

/* The end, told once; the connection closes after. */
static void finish(Upstream *u, const RpcMessage *m, int error) {
        if (u->done)
                return;
        u->done = true;
        uv_read_stop((uv_stream_t *) &u->pipe);
        u->cb.on_done(u->userdata, m, error);
        upstream_close(u);
}

/* One whole line: a notification goes on, a reply ends the request. */
static void take_line(Upstream *u, const char *line, size_t len) {
        RpcMessage m;

        if (protocol_parse_message(line, len, &m) < 0)
                return finish(u, NULL, -EBADMSG);
        if (m.kind == RPC_NOTIFICATION) {
                if (u->cb.on_notify)
                        u->cb.on_notify(u->userdata, &m);
        } else
                finish(u, &m, 0);
        rpc_message_done(&m);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        Upstream *u = h->data;
        size_t want = u->len + 65536;

        (void) suggested;
        if (want > u->alloc) {
                char *b = want <= PROTOCOL_MAX_REPLY_LINE + 65536 ? realloc(u->buf, want) : NULL;
                if (!b) {
                        *buf = uv_buf_init(NULL, 0);
                        return;
                }
                u->buf = b;
                u->alloc = want;
        }
        *buf = uv_buf_init(u->buf + u->len, (unsigned) (u->alloc - u->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        Upstream *u = s->data;
        size_t start = 0;
        char *nl;

        (void) buf;
        if (n == UV_ENOBUFS)
                return finish(u, NULL, u->len > PROTOCOL_MAX_REPLY_LINE ? -E2BIG : -ENOMEM);
        if (n < 0)
                return finish(u, NULL, n == UV_EOF ? -ECONNRESET : (int) n);
        u->len += (size_t) n;
        /* Lines may end inside this read; each is handled, the rest kept. A callback may end the request. */
        while (!u->done && (nl = memchr(u->buf + start, '\n', u->len - start))) {
                take_line(u, u->buf + start, (size_t) (nl - (u->buf + start)));
                start = (size_t) (nl - u->buf) + 1;
        }
        if (u->done)
                return;
        memmove(u->buf, u->buf + start, u->len - start);
        u->len -= start;
        if (u->len > PROTOCOL_MAX_REPLY_LINE)
                finish(u, NULL, -E2BIG);
}

static void on_written(uv_write_t *w, int status) {
        Upstream *u = w->data;

        if (status >= 0 || status == UV_ECANCELED)
                return;
        /* A daemon that refuses a connection (its bounds) writes why and closes, maybe before our request was
         * written: that line waits to be read, and the read that ends after it tells the rest. */
        if ((status == UV_EPIPE || status == UV_ECONNRESET) && (u->reading || u->paused))
                return;
        finish(u, NULL, status == UV_EPIPE ? -ECONNRESET : status);
}

static void read_start(Upstream *u) {
        if (u->reading)
                return;
        if (uv_read_start((uv_stream_t *) &u->pipe, on_alloc, on_read) < 0)
                return finish(u, NULL, -EIO);
        u->reading = true;
}

static void on_connected(uv_connect_t *c, int status) {
        Upstream *u = c->data;
        uv_buf_t b = uv_buf_init(u->request, (unsigned) strlen(u->request));
        int r;

        if (u->closing)
                return;
        if (status < 0)
                return finish(u, NULL, status);
        u->connected = true;
        u->write.data = u;
        r = uv_write(&u->write, (uv_stream_t *) &u->pipe, &b, 1, on_written);
        if (r < 0)
                return finish(u, NULL, r);
        if (!u->paused)
                read_start(u);
}

int upstream_call(uv_loop_t *loop, const char *socket_path, const char *method, json_t *params,
                  const UpstreamCallbacks *cb, void *userdata, Upstream **ret) {
        Upstream *u = calloc(1, sizeof *u);

        if (!u) {
                json_decref(params);
                return -ENOMEM;
        }
        u->request = protocol_request(1, method, params);
        if (!u->request) {
                free(u);
                return -ENOMEM;
        }
        if (strlen(u->request) - 1 > PROTOCOL_MAX_LINE) {
                free(u->request);
                free(u);
                return -E2BIG;
        }
        u->cb = *cb;
        u->userdata = userdata;
        (void) uv_pipe_init(loop, &u->pipe, 0);
        u->pipe.data = u;
        u->connect.data = u;
        /* A failure to connect comes to on_connected, on the loop. */
        uv_pipe_connect(&u->connect, &u->pipe, socket_path, on_connected);
        if (ret)
                *ret = u;
        return 0;
}

void upstream_pause(Upstream *u) {
        if (u->paused || u->done)
                return;
        u->paused = true;
        u->reading = false;
        uv_read_stop((uv_stream_t *) &u->pipe);
}

void upstream_resume(Upstream *u) {
        if (!u->paused || u->done)
                return;
        u->paused = false;
        if (u->connected)
                read_start(u);
}

void upstream_cancel(Upstream *u) {
        if (!u)
                return;
        u->done = true;
        upstream_close(u);
}

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "jupyter.h"
#include "macro.h"
#include "util.h"
#include "zmtp.h"

#define DELIM_LEN (sizeof(JUPYTER_DELIM) - 1)
#define SIG_HEX_LEN 64

/* The heartbeat only echoes our 8-byte pings: an echo's frames may add up to this. */
#define HB_MAX_MESSAGE 4096

/* How soon a connect that found no listener is tried again. We connect as the kernel is launched, before it
 * binds: libzmq's default of 100 ms made 100-200 ms pass between a kernel binding its ports and our connecting
 * to them, most of what a preloaded kernel's start took. The price: a kernel that never binds costs the daemon
 * ~0.4% of a core until its start_timeout. */
#define RECONNECT_IVL_MSEC 10
/* The most a retry's wait doubles: 10 ms << 7 = 1.28 s. */
#define RECONNECT_BACKOFF_MAX 7

/* ---- The pure layer. ---- */

static inline void evp_mac_freep(EVP_MAC **p) {
        EVP_MAC_free(*p);
}

static inline void evp_mac_ctx_freep(EVP_MAC_CTX **p) {
        EVP_MAC_CTX_free(*p);
}

/* HMAC-SHA256 in lower-case hex over the four parts, keyed by the bytes of
 * key, as jupyter_client's Session.sign does. An empty key gives "". */
static int hmac_hex(const char *key, const void *const parts[4], const size_t lens[4], char ret_hex[65]) {
        _cleanup_(evp_mac_freep) EVP_MAC *mac = NULL;
        _cleanup_(evp_mac_ctx_freep) EVP_MAC_CTX *ctx = NULL;
        unsigned char md[EVP_MAX_MD_SIZE];
        OSSL_PARAM params[2];
        size_t md_len = 0;

        if (!key || !*key) {
                ret_hex[0] = '\0';
                return 0;
        }

        mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
        if (!mac)
                return -EIO;
        ctx = EVP_MAC_CTX_new(mac);
        if (!ctx)
                return -ENOMEM;
        params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *) "SHA256", 0);
        params[1] = OSSL_PARAM_construct_end();
        if (EVP_MAC_init(ctx, (const unsigned char *) key, strlen(key), params) != 1)
                return -EIO;
        for (size_t i = 0; i < 4; i++)
                if (EVP_MAC_update(ctx, parts[i], lens[i]) != 1)
                        return -EIO;
        if (EVP_MAC_final(ctx, md, &md_len, sizeof md) != 1 || md_len != SIG_HEX_LEN / 2)
                return -EIO;

        hex_encode(md, md_len, ret_hex);
        return 0;
}

void jupyter_sign(const char *key, const char *const parts[4], const size_t lens[4], char ret_hex[65]) {
        const void *const p[4] = { parts[0], parts[1], parts[2], parts[3] };

        /* OpenSSL only fails here when out of memory. An empty signature then
         * fails closed: the kernel drops the message rather than trusting it. */
        if (hmac_hex(key, p, lens, ret_hex) < 0)
                ret_hex[0] = '\0';
}

void jupyter_msg_done(JupyterMsg *m) {
        if (!m)
                return;
        json_decref(m->header);
        json_decref(m->parent_header);
        json_decref(m->metadata);
        json_decref(m->content);
        *m = (JupyterMsg){};
}

static const char *object_string(const json_t *o, const char *field) {
        const char *s = json_string_value(json_object_get(o, field));

        return s ? s : "";
}

const char *jupyter_msg_type(const JupyterMsg *m) {
        return object_string(m->header, "msg_type");
}

const char *jupyter_msg_id(const JupyterMsg *m) {
        return object_string(m->header, "msg_id");
}

const char *jupyter_msg_parent_id(const JupyterMsg *m) {
        return object_string(m->parent_header, "msg_id");
}

int jupyter_msg_new(const char *msg_type, const char *session, json_t *content, JupyterMsg *ret) {
        json_auto_t *c = content;
        json_auto_t *header = NULL;
        json_auto_t *parent = NULL;
        json_auto_t *metadata = NULL;
        char msg_id[37], date[32];

        if (!msg_type || !*msg_type || !session || !ret)
                return -EINVAL;
        if (!c) {
                c = json_object();
                if (!c)
                        return -ENOMEM;
        } else if (!json_is_object(c))
                return -EINVAL;

        uuid_random(msg_id);
        format_timestamp_usec(date, sizeof date, now_usec(CLOCK_REALTIME));
        header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type", msg_type, "session",
                           session, "username", "kernelsup", "date", date, "version", JUPYTER_PROTOCOL_VERSION);
        parent = json_object();
        metadata = json_object();
        if (!header || !parent || !metadata)
                return -ENOMEM;

        *ret = (JupyterMsg){
                .header = TAKE_PTR(header),
                .parent_header = TAKE_PTR(parent),
                .metadata = TAKE_PTR(metadata),
                .content = TAKE_PTR(c),
        };
        return 0;
}

void jupyter_frames_done(JupyterFrames *f) {
        if (!f)
                return;
        for (size_t i = 0; i < ELEMENTSOF(f->part); i++)
                free(f->part[i]);
        *f = (JupyterFrames){};
}

static inline void jupyter_frames_donep(JupyterFrames *f) {
        jupyter_frames_done(f);
}

int jupyter_msg_serialize(const JupyterMsg *m, const char *key, JupyterFrames *ret) {
        _cleanup_(jupyter_frames_donep) JupyterFrames f = {};
        const json_t *dicts[4] = { m->header, m->parent_header, m->metadata, m->content };
        char sig[SIG_HEX_LEN + 1];
        int r;

        /* The header is what makes a message; the others may be left out and
         * then go on the wire as {}, which is what Jupyter sends for "none". */
        if (!m->header)
                return -EINVAL;
        for (size_t i = 0; i < 4; i++) {
                if (dicts[i] && !json_is_object(dicts[i]))
                        return -EINVAL;
                f.part[2 + i] = dicts[i] ? json_dumps(dicts[i], JSON_COMPACT) : strdup("{}");
                if (!f.part[2 + i])
                        return -ENOMEM;
                f.len[2 + i] = strlen(f.part[2 + i]);
        }

        r = hmac_hex(key, (const void *const *) &f.part[2], &f.len[2], sig);
        if (r < 0)
                return r;
        f.part[0] = strdup(JUPYTER_DELIM);
        f.part[1] = strdup(sig);
        if (!f.part[0] || !f.part[1])
                return -ENOMEM;
        f.len[0] = DELIM_LEN;
        f.len[1] = strlen(sig);

        *ret = f;
        f = (JupyterFrames){};
        return 0;
}

static int unhex_digit(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
                return (c | 0x20) - 'a' + 10;
        return -1;
}

/* The value of the \uXXXX escape at p[0..len) (p[0] is the backslash), or -1 when it is not one. */
static long escape_value(const char *p, size_t len) {
        long v = 0;

        if (len < 6 || p[1] != 'u')
                return -1;
        for (size_t i = 2; i < 6; i++) {
                int h = unhex_digit(p[i]);

                if (h < 0)
                        return -1;
                v = v * 16 + h;
        }
        return v;
}

/* How many bytes of input the unit at p[0..len) takes, and what it becomes: *ret_out (out_len bytes) either p
 * itself or a replacement. */
static size_t repair_unit(const char *p, size_t len, const char **ret_out, size_t *ret_out_len) {
        size_t bad = 0, k;
        long v;

        *ret_out = p;
        if (p[0] == '\\') {
                v = escape_value(p, len);
                if (v >= 0xD800 && v <= 0xDBFF) {
                        long lo = len >= 12 && p[6] == '\\' ? escape_value(p + 6, len - 6) : -1;

                        k = lo >= 0xDC00 && lo <= 0xDFFF ? 12 : 6;
                        if (k == 6)
                                *ret_out = "\\uFFFD";
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                        k = 6;
                        *ret_out = "\\uFFFD";
                } else
                        /* Two bytes, so that the second backslash of "\\\\" never starts an escape. */
                        k = v >= 0 ? 6 : len >= 2 && (unsigned char) p[1] < 0x80 ? 2 : 1;
                *ret_out_len = *ret_out == p ? k : 6;
                return k;
        }
        k = utf8_sequence(p, len, &bad);
        if (k > 0) {
                *ret_out_len = k;
                return k;
        }
        *ret_out = UTF8_REPLACEMENT;
        *ret_out_len = 3;
        return bad;
}

/* Copies p[0..len) repaired to out (NULL: only counts); returns the length and the number of units rewritten. */
static size_t json_repair_into(const char *p, size_t len, char *out, size_t *ret_rewritten) {
        size_t i = 0, o = 0, rewritten = 0;

        while (i < len) {
                const char *u;
                size_t n, k = repair_unit(p + i, len - i, &u, &n);

                if (out)
                        memcpy(out + o, u, n);
                rewritten += u != p + i;
                i += k, o += n;
        }
        *ret_rewritten = rewritten;
        return o;
}

int jupyter_json_repair(const char *p, size_t len, char **ret, size_t *ret_len) {
        return text_rewrite(p, len, json_repair_into, ret, ret_len);
}

/* One dict of a message, read as jupyter_msg_parse() says; NULL when it is not JSON (or out of memory). */
static json_t *dict_load(const void *p, size_t len) {
        _cleanup_free_ char *fixed = NULL;
        json_error_t error;
        json_t *v;

        if (len == 0)
                return NULL;
        if (jupyter_json_repair(p, len, &fixed, &len) < 0)
                return NULL;
        if (fixed)
                p = fixed;
        v = json_loadb(p, len, JSON_ALLOW_NUL, &error);
        /* Python's ints have no bound (a client's header may hold 10**30); a real keeps the message. */
        if (!v && json_error_code(&error) == json_error_numeric_overflow)
                v = json_loadb(p, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
        return v;
}

int jupyter_msg_parse(const void *const *frames, const size_t *lens, size_t n, const char *key, JupyterMsg *ret) {
        json_t *dicts[4] = {};
        size_t d;
        int r;

        for (d = 0; d < n; d++)
                if (lens[d] == DELIM_LEN && memcmp(frames[d], JUPYTER_DELIM, DELIM_LEN) == 0)
                        break;
        /* The signature and the four dicts must follow the delimiter. */
        if (d == n || n - d - 1 < 5)
                return -EBADMSG;

        /* Verify before parsing, so unauthenticated input never reaches the JSON parser. */
        if (key && *key) {
                char expect[SIG_HEX_LEN + 1];

                r = hmac_hex(key, &frames[d + 2], &lens[d + 2], expect);
                if (r < 0)
                        return r;
                if (lens[d + 1] != SIG_HEX_LEN || CRYPTO_memcmp(expect, frames[d + 1], SIG_HEX_LEN) != 0)
                        return -EPERM;
        }

        for (size_t i = 0; i < 4; i++) {
                dicts[i] = dict_load(frames[d + 2 + i], lens[d + 2 + i]);
                if (!json_is_object(dicts[i])) {
                        for (size_t j = 0; j <= i; j++)
                                json_decref(dicts[j]);
                        return -EBADMSG;
                }
        }

        *ret = (JupyterMsg){
                .header = dicts[0],
                .parent_header = dicts[1],
                .metadata = dicts[2],
                .content = dicts[3],
        };
        return 0;
}

/* ---- KernelConn. ---- */

/* The kernel's sockets we connect to, in the order of KernelConn.link[]. */
enum {
        SOCK_SHELL,
        SOCK_CONTROL,
        SOCK_IOPUB,
        SOCK_STDIN,
        SOCK_HB,
        _SOCK_MAX,
};

static const struct {
        Channel channel;
        const char *type; /* our ZMTP Socket-Type */
        ZmtpKeep keep;
        bool identity; /* the connection's routing identity is our session id */
} sock_table[_SOCK_MAX] = {
        /* A kernel asks for input on its stdin ROUTER with the routing identity of the shell request's sender
         * (ipykernel, IRkernel): shell and stdin share one, or the ROUTER drops the request unseen and the kernel
         * waits for its reply forever (IRkernel does so whatever allow_stdin says). */
        [SOCK_SHELL] = { CHANNEL_SHELL, "DEALER", ZMTP_KEEP_JUPYTER, true },
        [SOCK_CONTROL] = { CHANNEL_CONTROL, "DEALER", ZMTP_KEEP_JUPYTER },
        [SOCK_IOPUB] = { CHANNEL_IOPUB, "SUB", ZMTP_KEEP_JUPYTER },
        [SOCK_STDIN] = { CHANNEL_STDIN, "DEALER", ZMTP_KEEP_JUPYTER, true },
        /* The kernel's hb echoes what it gets: ipykernel's is a ROUTER echo, IRkernel's and tslab's a REP. A
         * REQ that missed a reply is stuck in its state machine; a DEALER never is, and echoes are matched by
         * payload. A DEALER must then send the empty delimiter frame a REQ would: a REP drops a message
         * without it. */
        [SOCK_HB] = { CHANNEL_HB, "DEALER", ZMTP_KEEP_FIRST },
};

/* What one socket may have waiting to go out (requests sent before the connection is up, or that the kernel
 * does not read): beyond it kernel_conn_send says -EAGAIN. A request is at most a cell of 256 KiB. */
#define SEND_QUEUE_MAX ((size_t) 16 << 20)

/* Where the bytes read from any kernel go before the reader takes them (it copies what it keeps): one buffer
 * for every connection of the thread's loop, since each read is consumed before the next one starts. */
#define READ_BUFFER_SIZE ((size_t) 64 << 10)

typedef struct Link {
        KernelConn *c;
        union {
                uv_handle_t handle;
                uv_stream_t stream;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } h;
        bool h_init;       /* h is initialised and its close callback has not run */
        bool connected;    /* our greeting and READY went out */
        bool up;           /* the kernel's READY came: messages may go out */
        bool at_once;      /* once h is closed, connect again without waiting */
        unsigned failures; /* connections in a row that broke before the kernel's READY (the retry waits more) */
        uv_connect_t connect;
        uv_timer_t retry;
        ZmtpReader reader;
        uint8_t *pending; /* whole messages written while not up, sent once connected */
        size_t n_pending;
} Link;

struct KernelConn {
        uv_loop_t *loop;
        Link link[_SOCK_MAX];
        unsigned n_open_handles; /* initialised handles whose close callback has not run yet */

        KernelConnCallbacks cb;
        void *userdata;
        char key[KEY_HEX_LEN + 1];
        char session[37];
        size_t max_message;

        bool ipc;
        union {
                struct sockaddr_storage tcp;
                char path[UNIX_PATH_MAX_LEN + 1];
        } addr[_SOCK_MAX];

        uint64_t hb_last;  /* payload of the latest ping */
        bool hb_waiting;   /* the latest ping has not been echoed yet */
        unsigned hb_fresh; /* connections opened anew after a missed beat */
        unsigned dropped;
        unsigned reconnects;
        bool closing;
};

/* One write: the frames of a message (or the greeting and READY), copied. */
typedef struct WriteReq {
        uv_write_t req;
        Link *link;
        size_t len;
        uint8_t data[];
} WriteReq;

static const ZmtpSink link_sink;
static void link_broken(Link *l);

static size_t link_index(const Link *l) {
        return (size_t) (l - l->c->link);
}

static void conn_free(KernelConn *c) {
        for (size_t i = 0; i < _SOCK_MAX; i++) {
                zmtp_reader_reset(&c->link[i].reader);
                free(c->link[i].pending);
        }
        explicit_bzero(c->key, sizeof c->key);
        free(c);
}

/* Every handle's data is its Link. */
static void on_handle_closed(uv_handle_t *h) {
        Link *l = h->data;
        KernelConn *c = l->c;

        if (--c->n_open_handles == 0 && c->closing)
                conn_free(c);
}

static void link_connect(Link *l);

static void on_retry(uv_timer_t *t) {
        link_connect(t->data);
}

/* The stream is closed: connect again, at once after a missed beat, else after RECONNECT_IVL_MSEC, doubled for
 * each connection in a row that broke before READY (a listener that is no kernel's, up to 1.28 s). A refused
 * connect does not count: a kernel that is starting binds soon, and is connected to within 10 ms. */
static void on_stream_closed(uv_handle_t *h) {
        Link *l = h->data;
        KernelConn *c = l->c;

        l->h_init = false;
        /* Closing: the last handle frees c. Else the retry timer is open, so c stays. */
        if (c->closing)
                return on_handle_closed(h);
        c->n_open_handles--;
        if (l->at_once) {
                l->at_once = false;
                link_connect(l);
        } else
                (void) uv_timer_start(&l->retry, on_retry, (uint64_t) RECONNECT_IVL_MSEC << l->failures, 0);
}

/* Ends the link's connection (or its attempt); a new one follows. */
static void link_close(Link *l) {
        l->up = l->connected = false;
        zmtp_reader_reset(&l->reader);
        if (l->h_init && !uv_is_closing(&l->h.handle))
                uv_close(&l->h.handle, on_stream_closed);
}

/* A connection broke, or the kernel sent what is no ZMTP: made again. One that was up (past the kernel's READY)
 * may have lost messages: counted and told. */
static void link_broken(Link *l) {
        KernelConn *c = l->c;
        bool was_up = l->up;

        if (l->connected && !l->up && l->failures < RECONNECT_BACKOFF_MAX)
                l->failures++;
        link_close(l);
        if (!was_up)
                return;
        c->reconnects++;
        if (c->cb.on_dropped)
                c->cb.on_dropped(c, sock_table[link_index(l)].channel, c->userdata);
}

static void on_write(uv_write_t *req, int status) {
        WriteReq *w = (WriteReq *) req;
        Link *l = w->link;

        free(w);
        if (status < 0 && status != UV_ECANCELED && !l->c->closing)
                link_broken(l);
}

/* A write of len bytes on l, its data to be filled in; NULL when out of memory. */
static WriteReq *write_req_new(Link *l, size_t len) {
        WriteReq *w = malloc(sizeof *w + len);

        if (w) {
                w->link = l;
                w->len = len;
        }
        return w;
}

/* Starts w on its link's connection; on failure w is freed. */
static int write_req_submit(WriteReq *w) {
        uv_buf_t b = uv_buf_init((char *) w->data, (unsigned) w->len);
        int r = uv_write(&w->req, &w->link->h.stream, &b, 1, on_write);

        if (r < 0)
                free(w);
        return r;
}

/* Writes p[0..len) on the connection. */
static int link_write(Link *l, const uint8_t *p, size_t len) {
        WriteReq *w = write_req_new(l, len);

        if (!w)
                return -ENOMEM;
        memcpy(w->data, p, len);
        return write_req_submit(w);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *ret) {
        static _Thread_local char buf[READ_BUFFER_SIZE];

        *ret = uv_buf_init(buf, sizeof buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        Link *l = s->data;
        int r;

        if (n == 0 || l->c->closing)
                return;
        if (n < 0)
                return link_broken(l);
        r = zmtp_reader_feed(&l->reader, buf->base, (size_t) n);
        /* -ECANCELED: a callback closed the connection. */
        if (r < 0 && r != -ECANCELED && !l->c->closing)
                link_broken(l);
}

/* Connected: our greeting and READY go out. libzmq takes no message before it has sent its own READY (it drops
 * the connection for one), so what waits is sent when the kernel's READY comes (link_on_command). */
static void on_connected(uv_connect_t *req, int status) {
        Link *l = req->data;
        size_t idx = link_index(l);
        uint8_t hello[ZMTP_GREETING_SIZE + 128]; /* READY: its type and our 36-byte identity */
        int r;

        if (status == UV_ECANCELED || l->c->closing)
                return;
        if (status < 0)
                return link_close(l);
        zmtp_greeting(hello);
        r = zmtp_ready(sock_table[idx].type, sock_table[idx].identity ? l->c->session : NULL,
                       hello + ZMTP_GREETING_SIZE, sizeof hello - ZMTP_GREETING_SIZE);
        if (r < 0)
                return link_close(l);
        zmtp_reader_reset(&l->reader);
        zmtp_reader_init(&l->reader, sock_table[idx].keep, idx == SOCK_HB ? HB_MAX_MESSAGE : l->c->max_message,
                         &link_sink, l);
        if (link_write(l, hello, ZMTP_GREETING_SIZE + (size_t) r) < 0 ||
            uv_read_start(&l->h.stream, on_alloc, on_read) < 0)
                return link_close(l);
        l->connected = true;
}

/* The kernel's READY: the subscription to everything (iopub), then what was sent meanwhile. */
static int link_on_command(void *userdata, const char *name, const uint8_t *data, size_t len) {
        static const uint8_t subscribe_all[] = { 0, 1, 1 }; /* ZMTP 3.0's: a message of 1 and no prefix */
        Link *l = userdata;

        if (!streq(name, "READY") || l->up)
                return 0;
        l->up = true;
        l->failures = 0;
        if ((link_index(l) == SOCK_IOPUB && link_write(l, subscribe_all, sizeof subscribe_all) < 0) ||
            (l->n_pending > 0 && link_write(l, l->pending, l->n_pending) < 0)) {
                link_broken(l);
                return -ECANCELED;
        }
        free(l->pending);
        l->pending = NULL;
        l->n_pending = 0;
        return 0;
}

static void link_connect(Link *l) {
        KernelConn *c = l->c;
        size_t idx = link_index(l);
        int r;

        if (c->closing || l->h_init)
                return;
        r = c->ipc ? uv_pipe_init(c->loop, &l->h.pipe, 0) : uv_tcp_init(c->loop, &l->h.tcp);
        if (r < 0) {
                (void) uv_timer_start(&l->retry, on_retry, RECONNECT_IVL_MSEC, 0);
                return;
        }
        l->h.handle.data = l;
        l->h_init = true;
        c->n_open_handles++;
        l->connect.data = l;
        if (c->ipc) {
                uv_pipe_connect(&l->connect, &l->h.pipe, c->addr[idx].path, on_connected);
                return;
        }
        (void) uv_tcp_nodelay(&l->h.tcp, 1);
        r = uv_tcp_connect(&l->connect, &l->h.tcp, (const struct sockaddr *) &c->addr[idx].tcp, on_connected);
        if (r < 0)
                link_close(l);
}

/* What a sink returns after a callback: -ECANCELED when it closed the connection, or this link (a ping after a
 * missed beat connects the heartbeat anew), so that the reader reads nothing more of this read. */
static int link_go_on(const Link *l) {
        return l->c->closing || !l->connected ? -ECANCELED : 0;
}

static int conn_dispatch_hb(KernelConn *c, const void *const *frames, const size_t *lens, size_t n) {
        /* The echo of [delimiter, payload]; a kernel that echoes only the last frame is answered too. */
        const void *payload = frames[n - 1];

        /* Echoes of older pings are late, not wrong: they are ignored, not counted. */
        if (n < 1 || n > 2 || (n == 2 && lens[0] != 0) || lens[n - 1] != sizeof c->hb_last ||
            memcmp(payload, &c->hb_last, sizeof c->hb_last) != 0 || !c->hb_waiting)
                return 0;
        c->hb_waiting = false;
        if (c->cb.on_hb)
                c->cb.on_hb(c, c->userdata);
        return 0;
}

static int conn_send_msg(KernelConn *c, Link *l, const char *msg_type, const json_t *parent, json_t *content,
                         char ret_msg_id[37]);

/* An input_request: answered at once with an empty value (cells run without stdin), then told. */
static void conn_on_stdin(KernelConn *c, const JupyterMsg *msg) {
        if (!streq(jupyter_msg_type(msg), "input_request"))
                return;
        (void) conn_send_msg(c, &c->link[SOCK_STDIN], "input_reply", msg->header, json_pack("{s:s}", "value", ""),
                             NULL);
        if (c->cb.on_input_request)
                c->cb.on_input_request(c, msg, c->userdata);
}

static int link_on_message(void *userdata, const void *const *frames, const size_t *lens, size_t n, size_t n_total) {
        Link *l = userdata;
        KernelConn *c = l->c;
        size_t idx = link_index(l);
        JupyterMsg msg;

        if (idx == SOCK_HB) {
                if (n == n_total && n > 0)
                        (void) conn_dispatch_hb(c, frames, lens, n);
                return link_go_on(l);
        }
        if (jupyter_msg_parse(frames, lens, n, c->key, &msg) < 0) {
                c->dropped++;
                if (c->cb.on_unreadable)
                        c->cb.on_unreadable(c, sock_table[idx].channel, c->userdata);
                return link_go_on(l);
        }
        if (idx == SOCK_STDIN)
                conn_on_stdin(c, &msg);
        else if (idx == SOCK_IOPUB) {
                if (c->cb.on_iopub)
                        c->cb.on_iopub(c, &msg, c->userdata);
        } else if (c->cb.on_reply)
                c->cb.on_reply(c, sock_table[idx].channel, &msg, c->userdata);
        jupyter_msg_done(&msg);
        return link_go_on(l);
}

/* A message whose envelope and dicts came to more than max_message: read past, never held, and told. */
static int link_on_oversized(void *userdata) {
        Link *l = userdata;
        KernelConn *c = l->c;

        if (link_index(l) != SOCK_HB && c->cb.on_dropped)
                c->cb.on_dropped(c, sock_table[link_index(l)].channel, c->userdata);
        return link_go_on(l);
}

static const ZmtpSink link_sink = {
        .message = link_on_message,
        .oversized = link_on_oversized,
        .command = link_on_command,
};

void kernel_conn_close(KernelConn *c) {
        if (!c || c->closing)
                return;
        c->closing = true;

        for (size_t i = 0; i < _SOCK_MAX; i++) {
                Link *l = &c->link[i];

                l->up = l->connected = false;
                if (l->h_init && !uv_is_closing(&l->h.handle))
                        uv_close(&l->h.handle, on_handle_closed);
                uv_close((uv_handle_t *) &l->retry, on_handle_closed);
        }
}

/* Where socket idx of the kernel at ci is: a Unix socket "<ip>-<port>", or ip:port. */
static int conn_address(KernelConn *c, const ConnectionInfo *ci, size_t idx) {
        unsigned port = ci->ports[sock_table[idx].channel];
        int k;

        if (c->ipc) {
                k = snprintf(c->addr[idx].path, sizeof c->addr[idx].path, "%s-%u", ci->ip, port);
                return k < 0 || (size_t) k >= sizeof c->addr[idx].path ? -EINVAL : 0;
        }
        if (uv_ip4_addr(ci->ip, (int) port, (struct sockaddr_in *) &c->addr[idx].tcp) == 0)
                return 0;
        return uv_ip6_addr(ci->ip, (int) port, (struct sockaddr_in6 *) &c->addr[idx].tcp) == 0 ? 0 : -EINVAL;
}

int kernel_conn_new(uv_loop_t *loop, const ConnectionInfo *ci, size_t max_message, const KernelConnCallbacks *cb,
                    void *userdata, KernelConn **ret) {
        KernelConn *c = NULL;
        unsigned char addr[sizeof(struct in6_addr)];
        int r;

        if (!loop || !ci || !ret)
                return -EINVAL;
        if (memchr(ci->ip, '\0', sizeof ci->ip) == NULL || memchr(ci->key, '\0', sizeof ci->key) == NULL)
                return -EINVAL;
        if (ci->transport == TRANSPORT_IPC) {
                /* A relative prefix would depend on our cwd. */
                if (ci->ip[0] != '/')
                        return -EINVAL;
        } else if (ci->transport != TRANSPORT_TCP)
                return -EINVAL;
        else if (inet_pton(AF_INET, ci->ip, addr) != 1 && inet_pton(AF_INET6, ci->ip, addr) != 1)
                return -EINVAL;
        for (size_t i = 0; i < _SOCK_MAX; i++)
                if (ci->ports[sock_table[i].channel] == 0)
                        return -EINVAL;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->loop = loop;
        c->userdata = userdata;
        if (cb)
                c->cb = *cb;
        strcpy(c->key, ci->key);
        uuid_random(c->session);
        c->max_message = max_message;
        c->ipc = ci->transport == TRANSPORT_IPC;
        for (size_t i = 0; i < _SOCK_MAX; i++) {
                r = conn_address(c, ci, i);
                if (r < 0) {
                        conn_free(c);
                        return r;
                }
        }

        for (size_t i = 0; i < _SOCK_MAX; i++) {
                Link *l = &c->link[i];

                l->c = c;
                (void) uv_timer_init(loop, &l->retry); /* it cannot fail */
                l->retry.data = l;
                c->n_open_handles++;
                link_connect(l);
        }

        *ret = c;
        return 0;
}

/* Writes the frames of a message, each header and part, into out (room for ZMTP_HEADER_MAX more a frame than the
 * parts); returns their length. */
static size_t frames_encode(const void *const *parts, const size_t *lens, size_t n, uint8_t *out) {
        size_t o = 0;

        for (size_t i = 0; i < n; i++) {
                o += zmtp_header(i + 1 < n ? ZMTP_FLAG_MORE : 0, lens[i], out + o);
                memcpy(out + o, parts[i], lens[i]);
                o += lens[i];
        }
        return o;
}

/* Sends the frames of one message, encoded straight into the write (the connection is up) or onto what waits
 * for the connection. */
static int link_send(Link *l, const void *const *parts, const size_t *lens, size_t n) {
        size_t total = 0;
        uint8_t *p;
        WriteReq *w;

        for (size_t i = 0; i < n; i++)
                total += ZMTP_HEADER_MAX + lens[i];
        if ((l->up ? uv_stream_get_write_queue_size(&l->h.stream) : l->n_pending) + total > SEND_QUEUE_MAX)
                return -EAGAIN;
        if (l->up) {
                w = write_req_new(l, total);
                if (!w)
                        return -ENOMEM;
                w->len = frames_encode(parts, lens, n, w->data);
                return write_req_submit(w);
        }
        p = realloc(l->pending, l->n_pending + total);
        if (!p)
                return -ENOMEM;
        l->pending = p;
        l->n_pending += frames_encode(parts, lens, n, p + l->n_pending);
        return 0;
}

/* A message of msg_type on l, with parent (borrowed; NULL: none) and content (stolen). */
static int conn_send_msg(KernelConn *c, Link *l, const char *msg_type, const json_t *parent, json_t *content,
                         char ret_msg_id[37]) {
        _cleanup_(jupyter_frames_donep) JupyterFrames f = {};
        JupyterMsg m;
        int r;

        r = jupyter_msg_new(msg_type, c->session, content, &m);
        if (r < 0)
                return r;
        if (parent) {
                json_decref(m.parent_header);
                m.parent_header = json_incref((json_t *) parent);
        }
        r = jupyter_msg_serialize(&m, c->key, &f);
        if (r >= 0 && ret_msg_id)
                snprintf(ret_msg_id, 37, "%s", jupyter_msg_id(&m));
        jupyter_msg_done(&m);
        if (r < 0)
                return r;
        return link_send(l, (const void *const *) f.part, f.len, ELEMENTSOF(f.part));
}

int kernel_conn_send(KernelConn *c, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]) {
        json_auto_t *owned = content;
        Link *l;

        if (!c || !msg_type)
                return -EINVAL;
        if (c->closing)
                return -ESHUTDOWN;
        if (channel == CHANNEL_SHELL)
                l = &c->link[SOCK_SHELL];
        else if (channel == CHANNEL_CONTROL)
                l = &c->link[SOCK_CONTROL];
        else
                return -EINVAL;
        return conn_send_msg(c, l, msg_type, NULL, TAKE_PTR(owned), ret_msg_id);
}

int kernel_conn_ping(KernelConn *c) {
        Link *l;
        uint64_t payload;
        int r;

        if (!c)
                return -EINVAL;
        if (c->closing)
                return -ESHUTDOWN;
        l = &c->link[SOCK_HB];

        /* A beat went unanswered: the next goes over a new connection, as jupyter_client's heartbeat opens a
         * new socket then, so that a peer that lost its state with us (a REP that took a frame it could not
         * answer) gets a clean one, and nothing queued on the old one is sent late. */
        if (c->hb_waiting) {
                free(l->pending);
                l->pending = NULL;
                l->n_pending = 0;
                if (l->h_init) {
                        l->at_once = true;
                        link_close(l);
                        c->hb_fresh++;
                }
        }
        payload = c->hb_last + 1;
        r = link_send(l, (const void *const[]){ "", &payload }, (const size_t[]){ 0, sizeof payload }, 2);
        if (r < 0)
                return r;
        /* Only the latest ping counts: an echo of an older one proves less. */
        c->hb_last = payload;
        c->hb_waiting = true;
        return 0;
}

unsigned kernel_conn_dropped(const KernelConn *c) {
        return c ? c->dropped : 0;
}

unsigned kernel_conn_hb_fresh(const KernelConn *c) {
        return c ? c->hb_fresh : 0;
}

unsigned kernel_conn_reconnects(const KernelConn *c) {
        return c ? c->reconnects : 0;
}

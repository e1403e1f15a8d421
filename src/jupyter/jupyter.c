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
#include <zmq.h>

#include "jupyter.h"
#include "macro.h"
#include "util.h"

#define DELIM_LEN (sizeof(JUPYTER_DELIM) - 1)
#define SIG_HEX_LEN 64

/* Frames kept per received message: routing identities (iopub topics), the
 * delimiter, the signature, four dicts and some buffers. Frames past this
 * are received and released unread; only buffers can be there in a
 * well-formed message, and buffers are ignored anyway. */
#define RECV_MAX_FRAMES 32

/* Messages handled on one socket per wake-up before yielding to the rest of
 * the loop, so a kernel flooding iopub cannot starve the other kernels; and
 * bytes, since parsing a message costs in proportion to its size (64 stream
 * messages of a MiB each would hold the loop for seconds). */
#define DRAIN_BUDGET 64
#define DRAIN_BUDGET_BYTES ((size_t) 4 << 20)

/* The heartbeat only echoes our 8-byte pings. */
#define HB_MAX_MESSAGE 4096

/* How soon libzmq tries a connect again that found no listener (libzmq adds up
 * to as much again at random). We connect as the kernel is launched, before it
 * binds: with libzmq's default of 100 ms, 100-200 ms passed between a kernel
 * binding its ports and our connecting to them, most of what a preloaded
 * kernel's start took. The price: a kernel that never binds costs the daemon
 * ~0.4% of a core (0.1% with the default) until its start_timeout. */
#define RECONNECT_IVL_MSEC 10

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

/* The sockets we open, in the order of KernelConn.sock[] and .poll[]. stdin
 * is not connected: we never allow input requests. */
enum {
        SOCK_SHELL,
        SOCK_CONTROL,
        SOCK_IOPUB,
        SOCK_HB,
        _SOCK_MAX,
};

static const struct {
        Channel channel;
        int type;
} sock_table[_SOCK_MAX] = {
        [SOCK_SHELL] = { CHANNEL_SHELL, ZMQ_DEALER },
        [SOCK_CONTROL] = { CHANNEL_CONTROL, ZMQ_DEALER },
        [SOCK_IOPUB] = { CHANNEL_IOPUB, ZMQ_SUB },
        /* The kernel's hb echoes what it gets: ipykernel's is a ROUTER echo, IRkernel's and tslab's a REP. A
         * REQ that missed a reply is stuck in its state machine; a DEALER never is, and echoes are matched by
         * payload. A DEALER must then send the empty delimiter frame a REQ would: a REP drops a message
         * without it. */
        [SOCK_HB] = { CHANNEL_HB, ZMQ_DEALER },
};

struct KernelConn {
        uv_loop_t *loop;
        void *sock[_SOCK_MAX];
        uv_poll_t poll[_SOCK_MAX];
        bool poll_init[_SOCK_MAX];
        /* Runs a drain on the next loop iteration after a send: a send makes
         * libzmq process its command mailbox, which can consume the ZMQ_FD
         * edge of a message that arrived meanwhile. Also resumes a drain that
         * ran out of budget. */
        uv_idle_t idle;
        bool idle_init;
        unsigned n_open_handles; /* initialised handles whose close callback has not run yet */

        KernelConnCallbacks cb;
        void *userdata;
        char key[KEY_HEX_LEN + 1];
        char session[37];

        /* PAIR sockets reading each socket's monitor (ZMQ_EVENT_DISCONNECTED):
         * libzmq does not reconnect after a frame over ZMQ_MAXMSGSIZE, we do. */
        void *mon[_SOCK_MAX];
        uv_poll_t mon_poll[_SOCK_MAX];
        bool mon_poll_init[_SOCK_MAX];

        uint64_t hb_last; /* payload of the latest ping */
        bool hb_waiting;  /* the latest ping has not been echoed yet */
        char hb_endpoint[sizeof "ipc://" + UNIX_PATH_MAX_LEN + 1 + sizeof "-65535"];
        unsigned hb_fresh; /* connections opened anew after a missed beat */
        unsigned dropped;
        unsigned reconnects;
        bool closing;
};

static void conn_free(KernelConn *c) {
        explicit_bzero(c->key, sizeof c->key);
        free(c);
}

static void on_handle_closed(uv_handle_t *h) {
        KernelConn *c = h->data;

        if (--c->n_open_handles == 0)
                conn_free(c);
}

void kernel_conn_close(KernelConn *c) {
        if (!c || c->closing)
                return;
        c->closing = true;

        for (size_t i = 0; i < _SOCK_MAX; i++) {
                /* Stop polling the fd before libzmq closes it: uv_close takes the
                 * fd out of epoll at once, zmq_close hands it to the reaper thread. */
                if (c->poll_init[i])
                        uv_close((uv_handle_t *) &c->poll[i], on_handle_closed);
                if (c->mon_poll_init[i])
                        uv_close((uv_handle_t *) &c->mon_poll[i], on_handle_closed);
                /* Stop the monitor while our PAIR still reads it: libzmq sends
                 * monitor events blocking, holding a lock that stopping takes,
                 * and a PAIR without its peer never takes them (a deadlock). */
                if (c->sock[i])
                        (void) zmq_socket_monitor(c->sock[i], NULL, 0);
                if (c->mon[i]) {
                        (void) zmq_close(c->mon[i]);
                        c->mon[i] = NULL;
                }
                if (c->sock[i]) {
                        (void) zmq_close(c->sock[i]);
                        c->sock[i] = NULL;
                }
        }
        if (c->idle_init)
                uv_close((uv_handle_t *) &c->idle, on_handle_closed);

        if (c->n_open_handles == 0)
                conn_free(c);
}

/* Whether the next frame received after parts[0..n) is kept: up to RECV_MAX_FRAMES, and none after the
 * signature and four dicts that follow a delimiter (a message's buffers are never read). *delim is the
 * delimiter's index once seen, SIZE_MAX before. */
static bool frame_kept(const zmq_msg_t *parts, size_t n, size_t *delim) {
        zmq_msg_t *last = n > 0 ? (zmq_msg_t *) &parts[n - 1] : NULL;

        if (*delim == SIZE_MAX && last && zmq_msg_size(last) == DELIM_LEN &&
            memcmp(zmq_msg_data(last), JUPYTER_DELIM, DELIM_LEN) == 0)
                *delim = n - 1;
        if (n >= RECV_MAX_FRAMES)
                return false;
        return *delim == SIZE_MAX || n <= *delim + 5;
}

/* Receives one whole multipart message without blocking. -EAGAIN when none is queued. A frame not kept (a
 * buffer) is released as soon as it is read: libzmq has the whole message already (it hands over none before
 * its last frame), but what the daemon holds while it parses is the envelope and the dicts alone. */
static int sock_recv(void *sock, zmq_msg_t parts[RECV_MAX_FRAMES], size_t *ret_n) {
        size_t n = 0, delim = SIZE_MAX;
        bool more = true;

        while (more) {
                zmq_msg_t extra, *m = frame_kept(parts, n, &delim) ? &parts[n] : &extra;

                zmq_msg_init(m);
                if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
                        int e = zmq_errno();

                        zmq_msg_close(m);
                        /* libzmq delivers multipart messages atomically, so a
                         * signal inside one is retried; before the first frame
                         * EINTR, like EAGAIN, means "look again later". */
                        if (e == EINTR && n > 0)
                                continue;
                        for (size_t i = 0; i < n && i < RECV_MAX_FRAMES; i++)
                                zmq_msg_close(&parts[i]);
                        return e == EINTR ? -EAGAIN : -e;
                }
                more = zmq_msg_more(m);
                if (m == &extra)
                        zmq_msg_close(m);
                else
                        n++;
        }

        *ret_n = n;
        return 0;
}

static void conn_dispatch_hb(KernelConn *c, zmq_msg_t *parts, size_t n) {
        /* The echo of [delimiter, payload]; a kernel that echoes only the last frame is answered too. */
        const zmq_msg_t *payload = &parts[n - 1];

        /* Echoes of older pings are late, not wrong: they are ignored, not counted. */
        if (n < 1 || n > 2 || (n == 2 && zmq_msg_size(&parts[0]) != 0) || zmq_msg_size(payload) != sizeof c->hb_last ||
            memcmp(zmq_msg_data((zmq_msg_t *) payload), &c->hb_last, sizeof c->hb_last) != 0 || !c->hb_waiting)
                return;
        c->hb_waiting = false;
        if (c->cb.on_hb)
                c->cb.on_hb(c, c->userdata);
}

static void conn_dispatch(KernelConn *c, size_t idx, zmq_msg_t *parts, size_t n) {
        const void *frames[RECV_MAX_FRAMES];
        size_t lens[RECV_MAX_FRAMES];
        JupyterMsg msg;
        int r;

        if (idx == SOCK_HB) {
                conn_dispatch_hb(c, parts, n);
                return;
        }

        for (size_t i = 0; i < n; i++) {
                frames[i] = zmq_msg_data(&parts[i]);
                lens[i] = zmq_msg_size(&parts[i]);
        }
        r = jupyter_msg_parse(frames, lens, n, c->key, &msg);
        if (r < 0) {
                c->dropped++;
                if (c->cb.on_unreadable)
                        c->cb.on_unreadable(c, sock_table[idx].channel, c->userdata);
                return;
        }

        if (idx == SOCK_IOPUB) {
                if (c->cb.on_iopub)
                        c->cb.on_iopub(c, &msg, c->userdata);
        } else if (c->cb.on_reply)
                c->cb.on_reply(c, sock_table[idx].channel, &msg, c->userdata);
        jupyter_msg_done(&msg);
}

/* Handles what is queued on one socket, up to a budget. ZMQ_FD only says
 * "something changed" and is edge-triggered: reading ZMQ_EVENTS re-arms it,
 * and we must go on until ZMQ_POLLIN is clear or no new edge will come.
 * Returns true when messages are left because the budget ran out. */
static bool conn_drain(KernelConn *c, size_t idx) {
        size_t bytes = 0;

        for (unsigned k = 0; k < DRAIN_BUDGET && bytes < DRAIN_BUDGET_BYTES; k++) {
                zmq_msg_t parts[RECV_MAX_FRAMES];
                size_t size = sizeof(int), n = 0;
                int events = 0;

                /* A callback may have closed the connection: the sockets are gone. */
                if (c->closing)
                        return false;
                if (zmq_getsockopt(c->sock[idx], ZMQ_EVENTS, &events, &size) < 0) {
                        /* EINTR: a signal came while libzmq processed its mailbox; look again later. */
                        return zmq_errno() == EINTR;
                }
                if (!(events & ZMQ_POLLIN))
                        return false;
                if (sock_recv(c->sock[idx], parts, &n) < 0)
                        continue; /* EAGAIN despite POLLIN, or EINTR: ZMQ_EVENTS decides */

                conn_dispatch(c, idx, parts, n);
                for (size_t i = 0; i < n; i++) {
                        bytes += zmq_msg_size(&parts[i]);
                        zmq_msg_close(&parts[i]);
                }
        }
        return !c->closing;
}

static void on_idle(uv_idle_t *h) {
        KernelConn *c = h->data;
        bool again = false;

        (void) uv_idle_stop(h);
        for (size_t i = 0; i < _SOCK_MAX && !c->closing; i++)
                again |= conn_drain(c, i);
        if (again && !c->closing)
                (void) uv_idle_start(h, on_idle);
}

static void conn_schedule_drain(KernelConn *c) {
        /* Starting an active idle handle is a no-op, so many sends make one drain. */
        (void) uv_idle_start(&c->idle, on_idle);
}

static void on_poll(uv_poll_t *h, int status, int events) {
        KernelConn *c = h->data;
        size_t idx = (size_t) (h - c->poll);

        /* Errors on libzmq's signalling fd cannot be acted upon; ZMQ_EVENTS tells the truth either way. */
        if (conn_drain(c, idx))
                conn_schedule_drain(c);
}

/* A connection of socket idx was dropped (endpoint: the frame libzmq sent,
 * not NUL-terminated): connect it again, since after a protocol error (a
 * frame over ZMQ_MAXMSGSIZE) libzmq 4.3 gives the endpoint up. */
static void conn_reconnect(KernelConn *c, size_t idx, const void *endpoint, size_t len) {
        char ep[512];

        if (len == 0 || len >= sizeof ep)
                return;
        memcpy(ep, endpoint, len);
        ep[len] = '\0';
        (void) zmq_disconnect(c->sock[idx], ep);
        (void) zmq_connect(c->sock[idx], ep);
        c->reconnects++;
        if (c->cb.on_dropped)
                c->cb.on_dropped(c, sock_table[idx].channel, c->userdata);
}

/* Handles the monitor events queued for socket idx: two frames each, the
 * event (u16 id, u32 value) and the endpoint. */
static void conn_drain_monitor(KernelConn *c, size_t idx) {
        for (unsigned k = 0; k < DRAIN_BUDGET && !c->closing; k++) {
                zmq_msg_t parts[RECV_MAX_FRAMES];
                size_t size = sizeof(int), n = 0;
                int events = 0;
                uint16_t event;

                if (zmq_getsockopt(c->mon[idx], ZMQ_EVENTS, &events, &size) < 0 || !(events & ZMQ_POLLIN))
                        return;
                if (sock_recv(c->mon[idx], parts, &n) < 0)
                        continue;
                if (n == 2 && zmq_msg_size(&parts[0]) == 6) {
                        memcpy(&event, zmq_msg_data(&parts[0]), sizeof event);
                        if (event == ZMQ_EVENT_DISCONNECTED)
                                conn_reconnect(c, idx, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]));
                }
                for (size_t i = 0; i < n; i++)
                        zmq_msg_close(&parts[i]);
        }
}

static void on_monitor_poll(uv_poll_t *h, int status, int events) {
        KernelConn *c = h->data;

        conn_drain_monitor(c, (size_t) (h - c->mon_poll));
}

/* Watches fd for reading with h, a handle of c's: once it is initialised
 * (*init set), c's close path closes it, and c's memory waits for it. */
static int conn_poll_start(KernelConn *c, uv_poll_t *h, bool *init, int fd, uv_poll_cb cb) {
        int r = uv_poll_init(c->loop, h, fd);

        if (r < 0)
                return r;
        h->data = c;
        *init = true;
        c->n_open_handles++;
        return uv_poll_start(h, UV_READABLE, cb);
}

/* Watches socket idx for dropped connections through an inproc monitor. */
static int conn_monitor(KernelConn *c, void *zmq_ctx, size_t idx) {
        static unsigned long seq;
        const int linger = 0;
        char addr[64];
        size_t size;
        int fd, r;

        snprintf(addr, sizeof addr, "inproc://kernelsup-monitor-%d-%lu", (int) getpid(), ++seq);
        if (zmq_socket_monitor(c->sock[idx], addr, ZMQ_EVENT_DISCONNECTED) < 0)
                return -zmq_errno();
        c->mon[idx] = zmq_socket(zmq_ctx, ZMQ_PAIR);
        size = sizeof fd;
        if (!c->mon[idx] || zmq_setsockopt(c->mon[idx], ZMQ_LINGER, &linger, sizeof linger) < 0 ||
            zmq_connect(c->mon[idx], addr) < 0 || zmq_getsockopt(c->mon[idx], ZMQ_FD, &fd, &size) < 0)
                return -zmq_errno();
        r = conn_poll_start(c, &c->mon_poll[idx], &c->mon_poll_init[idx], fd, on_monitor_poll);
        if (r < 0)
                return r;
        /* Until a read has found the queue empty, libzmq does not signal ZMQ_FD for a new message. */
        conn_drain_monitor(c, idx);
        return 0;
}

/* Bounds what one socket can make us hold: a frame over max (0: none) drops
 * the connection, and libzmq queues few messages before it stops reading. */
static int sock_set_limits(void *sock, size_t idx, size_t max) {
        const int64_t maxmsg = idx == SOCK_HB ? HB_MAX_MESSAGE : max > 0 ? (int64_t) max : -1;
        const int hwm = KERNEL_CONN_RCVHWM;

        if (zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) < 0 ||
            zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm) < 0)
                return -zmq_errno();
        return 0;
}

int kernel_conn_new(uv_loop_t *loop, void *zmq_ctx, const ConnectionInfo *ci, size_t max_message,
                    const KernelConnCallbacks *cb, void *userdata, KernelConn **ret) {
        KernelConn *c = NULL;
        unsigned char addr[sizeof(struct in6_addr)];
        bool ipv6 = false;
        int r;

        if (!loop || !zmq_ctx || !ci || !ret)
                return -EINVAL;
        if (memchr(ci->ip, '\0', sizeof ci->ip) == NULL || memchr(ci->key, '\0', sizeof ci->key) == NULL)
                return -EINVAL;
        if (ci->transport == TRANSPORT_IPC) {
                /* A relative prefix would depend on our cwd. */
                if (ci->ip[0] != '/')
                        return -EINVAL;
        } else if (ci->transport != TRANSPORT_TCP)
                return -EINVAL;
        else if (inet_pton(AF_INET, ci->ip, addr) != 1) {
                if (inet_pton(AF_INET6, ci->ip, addr) != 1)
                        return -EINVAL;
                ipv6 = true;
        }
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

        for (size_t i = 0; i < _SOCK_MAX; i++) {
                /* No lingering: a request to a dead kernel is worth nothing, and
                 * zmq_ctx_term must not wait for it. */
                const int linger = 0, one = 1, reconnect = RECONNECT_IVL_MSEC;
                /* Not ZMQ_IMMEDIATE (0 is the default, set to say so): the first
                 * request is usually sent before the kernel has bound its ports;
                 * it must wait in the pipe and go out when the connect succeeds. */
                const int immediate = 0;
                char endpoint[sizeof "ipc://" + sizeof ci->ip + sizeof "-65535"];
                int fd;
                size_t size = sizeof fd;

                c->sock[i] = zmq_socket(zmq_ctx, sock_table[i].type);
                if (!c->sock[i]) {
                        r = -zmq_errno();
                        goto fail;
                }
                if (zmq_setsockopt(c->sock[i], ZMQ_LINGER, &linger, sizeof linger) < 0 ||
                    zmq_setsockopt(c->sock[i], ZMQ_IMMEDIATE, &immediate, sizeof immediate) < 0 ||
                    zmq_setsockopt(c->sock[i], ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect) < 0 ||
                    (ipv6 && zmq_setsockopt(c->sock[i], ZMQ_IPV6, &one, sizeof one) < 0) ||
                    (sock_table[i].type == ZMQ_SUB && zmq_setsockopt(c->sock[i], ZMQ_SUBSCRIBE, "", 0) < 0)) {
                        r = -zmq_errno();
                        goto fail;
                }
                r = sock_set_limits(c->sock[i], i, max_message);
                if (r >= 0)
                        r = conn_monitor(c, zmq_ctx, i);
                if (r < 0)
                        goto fail;
                r = connection_endpoint(ci, sock_table[i].channel, endpoint, sizeof endpoint);
                if (r < 0)
                        goto fail;
                if (i == SOCK_HB)
                        snprintf(c->hb_endpoint, sizeof c->hb_endpoint, "%s", endpoint);
                if (zmq_connect(c->sock[i], endpoint) < 0 || zmq_getsockopt(c->sock[i], ZMQ_FD, &fd, &size) < 0) {
                        r = -zmq_errno();
                        goto fail;
                }

                r = conn_poll_start(c, &c->poll[i], &c->poll_init[i], fd, on_poll);
                if (r < 0)
                        goto fail;
        }

        r = uv_idle_init(loop, &c->idle);
        if (r < 0)
                goto fail;
        c->idle.data = c;
        c->idle_init = true;
        c->n_open_handles++;

        *ret = c;
        return 0;

fail:
        /* Handles already initialised are freed from their close callbacks, on the next loop run. */
        kernel_conn_close(c);
        return r;
}

int kernel_conn_send(KernelConn *c, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]) {
        json_auto_t *owned = content;
        _cleanup_(jupyter_frames_donep) JupyterFrames f = {};
        JupyterMsg m;
        void *sock;
        int r;

        if (!c || !msg_type)
                return -EINVAL;
        if (c->closing)
                return -ESHUTDOWN;
        if (channel == CHANNEL_SHELL)
                sock = c->sock[SOCK_SHELL];
        else if (channel == CHANNEL_CONTROL)
                sock = c->sock[SOCK_CONTROL];
        else
                return -EINVAL;

        r = jupyter_msg_new(msg_type, c->session, TAKE_PTR(owned), &m);
        if (r < 0)
                return r;
        r = jupyter_msg_serialize(&m, c->key, &f);
        if (r >= 0 && ret_msg_id)
                snprintf(ret_msg_id, 37, "%s", jupyter_msg_id(&m));
        jupyter_msg_done(&m);
        if (r < 0)
                return r;

        /* libzmq queues a multipart message atomically: when the first frame is
         * accepted the rest are too, so EAGAIN (queue full) can only come first. */
        for (size_t i = 0; i < ELEMENTSOF(f.part); i++) {
                int flags = ZMQ_DONTWAIT | (i + 1 < ELEMENTSOF(f.part) ? ZMQ_SNDMORE : 0);

                while (zmq_send(sock, f.part[i], f.len[i], flags) < 0) {
                        if (zmq_errno() == EINTR)
                                continue;
                        r = -zmq_errno();
                        conn_schedule_drain(c);
                        return r;
                }
        }

        conn_schedule_drain(c);
        return 0;
}

int kernel_conn_ping(KernelConn *c) {
        uint64_t payload;

        if (!c)
                return -EINVAL;
        if (c->closing)
                return -ESHUTDOWN;

        /* A beat went unanswered: the next goes over a new connection, as jupyter_client's heartbeat opens a
         * new socket then, so that a peer that lost its state with us (a REP that took a frame it could not
         * answer) gets a clean one, and nothing queued on the old one is sent late. */
        if (c->hb_waiting && c->hb_endpoint[0]) {
                (void) zmq_disconnect(c->sock[SOCK_HB], c->hb_endpoint);
                (void) zmq_connect(c->sock[SOCK_HB], c->hb_endpoint);
                c->hb_fresh++;
        }
        payload = c->hb_last + 1;
        /* libzmq queues a multipart message atomically: once the delimiter is accepted, so is the payload. */
        while (zmq_send(c->sock[SOCK_HB], "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0) {
                int e = zmq_errno();

                if (e == EINTR)
                        continue;
                conn_schedule_drain(c);
                return -e;
        }
        while (zmq_send(c->sock[SOCK_HB], &payload, sizeof payload, ZMQ_DONTWAIT) < 0) {
                int e = zmq_errno();

                if (e == EINTR)
                        continue;
                conn_schedule_drain(c);
                return -e;
        }
        /* Only the latest ping counts: an echo of an older one proves less. */
        c->hb_last = payload;
        c->hb_waiting = true;
        conn_schedule_drain(c);
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

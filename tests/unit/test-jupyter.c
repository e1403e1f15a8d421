/* Tests of the Jupyter wire protocol: the pure layer against vectors computed
 * independently, a KernelConn against an in-process fake kernel (to reach its
 * error paths on purpose), and a KernelConn against a real ipykernel. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "jupyter.h"
#include "util.h"
#include "ports.h"
#include "tap.h"

#define KEY "8f3c1a9e4b7d2f6051e8c3a7d9b2e4f60a1c3e5b7d9f2143658709badcfe1234"
#define OTHER_KEY "0000000000000000000000000000000000000000000000000000000000000001"
#define VEC_HEADER                                                                                                    \
        "{\"msg_id\":\"a3b1c2d4-0000-4000-8000-000000000001\",\"msg_type\":\"kernel_info_request\",\"session\":"      \
        "\"s1\",\"username\":\"kernelsup\",\"date\":\"2024-01-02T03:04:05.678901Z\",\"version\":\"5.3\"}"
#define SAFETY_TIMEOUT_MS 30000

/* A TAP test point skipped with a reason (tap.h only skips whole programs). */
static void skip(const char *reason) {
        printf("ok %d # SKIP %s\n", ++tap_n, reason);
}

/* ---- The pure layer. ---- */

static void test_sign_vectors(void) {
        const char *parts[4] = { VEC_HEADER, "{}", "{}", "{\"code\":\"x=6*7\"}" };
        size_t lens[4];
        char hex[65];

        for (size_t i = 0; i < 4; i++)
                lens[i] = strlen(parts[i]);
        /* Computed once with Python's hmac module over the same bytes:
         * /usr/bin/python3 -c 'import hmac, hashlib
         * h = hmac.new(KEY.encode(), digestmod=hashlib.sha256)
         * for p in [VEC_HEADER.encode(), b"{}", b"{}", b"{\"code\":\"x=6*7\"}"]: h.update(p)
         * print(h.hexdigest())'  (KEY and VEC_HEADER as #defined above) */
        jupyter_sign(KEY, parts, lens, hex);
        is_str(hex, "a6fbd7ddcffd46efcdd940377e3266de81fc5dd48ac532f3d3557ca90c20fed5", "sign: matches Python hmac");

        /* A one-byte key and an empty part, with the lengths (not NULs) ending
         * the parts: hmac.new(b"k", digestmod=hashlib.sha256) updated with
         * b"a", b"", b"bc", b"{}" gives this. */
        {
                const char *p2[4] = { "aXXX", "", "bcYY", "{}" };
                const size_t l2[4] = { 1, 0, 2, 2 };

                jupyter_sign("k", p2, l2, hex);
                is_str(hex, "e5fe6dabcb528b3991d1ca2283a45bcf189c27b2f7956b494054e7344962a5d3",
                       "sign: lengths bound the parts, empty part");
        }

        memset(hex, 'x', sizeof hex);
        jupyter_sign("", parts, lens, hex);
        is_str(hex, "", "sign: empty key gives an empty signature");
}

static bool is_digits(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        return true;
}

static void test_msg_new(void) {
        JupyterMsg m, m2, untouched;
        const char *id, *date;
        int r;

        r = jupyter_msg_new("execute_request", "sess-1", json_pack("{s:s}", "code", "1"), &m);
        is_int(r, 0, "new: ok");
        is_str(jupyter_msg_type(&m), "execute_request", "new: msg_type");
        is_str(json_string_value(json_object_get(m.header, "session")), "sess-1", "new: session");
        is_str(json_string_value(json_object_get(m.header, "username")), "kernelsup", "new: username");
        is_str(json_string_value(json_object_get(m.header, "version")), "5.3", "new: version");
        id = jupyter_msg_id(&m);
        ok(strlen(id) == 36 && id[8] == '-' && id[14] == '4' && id[23] == '-', "new: msg_id is a v4 uuid (%s)", id);
        date = json_string_value(json_object_get(m.header, "date"));
        ok(date && strlen(date) == 27 && is_digits(date, 4) && date[4] == '-' && date[10] == 'T' && date[19] == '.' &&
                   is_digits(date + 20, 6) && date[26] == 'Z',
           "new: date is ISO 8601 UTC with microseconds (%s)", date ? date : "(null)");
        ok(json_is_object(m.parent_header) && json_object_size(m.parent_header) == 0, "new: parent is {}");
        ok(json_is_object(m.metadata) && json_object_size(m.metadata) == 0, "new: metadata is {}");
        is_str(jupyter_msg_parent_id(&m), "", "new: no parent id");
        is_str(json_string_value(json_object_get(m.content, "code")), "1", "new: content kept");

        r = jupyter_msg_new("execute_request", "sess-1", NULL, &m2);
        is_int(r, 0, "new: NULL content");
        ok(json_is_object(m2.content) && json_object_size(m2.content) == 0, "new: NULL content gives {}");
        ok(!streq(jupyter_msg_id(&m), jupyter_msg_id(&m2)), "new: msg_ids differ");
        jupyter_msg_done(&m);
        jupyter_msg_done(&m2);
        ok(!m.header && !m.content, "done: clears the message");
        jupyter_msg_done(&m); /* twice is harmless */
        is_str(jupyter_msg_type(&m), "", "accessor on an empty message gives \"\"");

        untouched = (JupyterMsg){ .header = json_object() };
        is_int(jupyter_msg_new("x", "s", json_integer(1), &untouched), -EINVAL, "new: non-object content");
        is_int(jupyter_msg_new("", "s", json_object(), &untouched), -EINVAL, "new: empty msg_type");
        is_int(jupyter_msg_new(NULL, "s", NULL, &untouched), -EINVAL, "new: NULL msg_type");
        is_int(jupyter_msg_new("x", NULL, NULL, &untouched), -EINVAL, "new: NULL session");
        ok(untouched.header && json_object_size(untouched.header) == 0 && !untouched.content,
           "new: ret untouched on failure");
        json_decref(untouched.header);
}

static bool is_lower_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* A message to take apart, serialised with key. */
static void make_frames(const char *key, JupyterMsg *ret_m, JupyterFrames *ret_f) {
        int r;

        r = jupyter_msg_new(
                "kernel_info_request", "sess",
                json_pack("{s:s, s:[i, i], s:{s:b}}", "code", "print('é')", "list", 1, 2, "nested", "t", 1), ret_m);
        if (r < 0)
                abort();
        json_object_set_new(ret_m->parent_header, "msg_id", json_string("parent-1"));
        r = jupyter_msg_serialize(ret_m, key, ret_f);
        if (r < 0)
                abort();
}

static void test_roundtrip(void) {
        JupyterMsg m, p, untouched = {};
        JupyterFrames f, fe;
        const void *frames[10];
        size_t lens[10], n = 0;
        char sig[65];
        int r;

        make_frames(KEY, &m, &f);
        is_str(f.part[0], JUPYTER_DELIM, "serialize: delimiter first");
        is_int(f.len[0], strlen(JUPYTER_DELIM), "serialize: delimiter length");
        ok(f.len[1] == 64 && strlen(f.part[1]) == 64 && is_lower_hex(f.part[1], 64), "serialize: 64 hex signature");
        jupyter_sign(KEY, (const char *const *) &f.part[2], &f.len[2], sig);
        is_str(f.part[1], sig, "serialize: signature over the four dicts as sent");
        ok(!strstr(f.part[5], ", ") && !strstr(f.part[5], ": "), "serialize: compact JSON (%s)", f.part[5]);
        for (size_t i = 2; i < 6; i++)
                is_int(f.len[i], strlen(f.part[i]), "serialize: len[%zu]", i);

        /* Routing identities in front (one looking almost like the delimiter), a buffer after. */
        frames[n] = "id-1", lens[n++] = 4;
        frames[n] = "<IDS|MSG>x", lens[n++] = 10;
        for (size_t i = 0; i < 6; i++)
                frames[n] = f.part[i], lens[n++] = f.len[i];
        frames[n] = "\x00\x01binary", lens[n++] = 8;
        r = jupyter_msg_parse(frames, lens, n, KEY, &p);
        is_int(r, 0, "parse: round trip with identities and a buffer");
        if (r == 0) {
                ok(json_equal(p.header, m.header), "parse: header equal");
                ok(json_equal(p.parent_header, m.parent_header), "parse: parent equal");
                ok(json_equal(p.metadata, m.metadata), "parse: metadata equal");
                ok(json_equal(p.content, m.content), "parse: content equal");
                is_str(jupyter_msg_parent_id(&p), "parent-1", "parse: parent id");
                is_str(jupyter_msg_id(&p), jupyter_msg_id(&m), "parse: msg id");
                jupyter_msg_done(&p);
        }

        /* Without a header there is no message. */
        untouched.content = json_object();
        is_int(jupyter_msg_serialize(&untouched, KEY, &fe), -EINVAL, "serialize: no header");
        untouched.header = json_array();
        is_int(jupyter_msg_serialize(&untouched, KEY, &fe), -EINVAL, "serialize: non-object header");
        jupyter_msg_done(&untouched);

        /* The other dicts default to {}. */
        untouched.header = json_pack("{s:s}", "msg_type", "x");
        r = jupyter_msg_serialize(&untouched, KEY, &fe);
        is_int(r, 0, "serialize: missing parent/metadata/content");
        if (r == 0) {
                ok(streq(fe.part[3], "{}") && streq(fe.part[4], "{}") && streq(fe.part[5], "{}"),
                   "serialize: missing dicts go out as {}");
                jupyter_frames_done(&fe);
        }
        jupyter_msg_done(&untouched);

        jupyter_frames_done(&f);
        ok(!f.part[0] && !f.part[5], "frames_done clears");
        jupyter_frames_done(&f);
        jupyter_msg_done(&m);
}

/* Parses the six frames f, with part `which` replaced by `with` (when not
 * NULL) and, when resign, the signature recomputed with key afterwards. */
static int parse_modified(const JupyterFrames *f, int which, const char *with, bool resign, const char *key,
                          JupyterMsg *ret) {
        const char *parts[6];
        size_t lens[6];
        char sig[65];

        for (size_t i = 0; i < 6; i++)
                parts[i] = f->part[i], lens[i] = f->len[i];
        if (with)
                parts[which] = with, lens[which] = strlen(with);
        if (resign) {
                jupyter_sign(key, &parts[2], &lens[2], sig);
                parts[1] = sig, lens[1] = strlen(sig);
        }
        return jupyter_msg_parse((const void *const *) parts, lens, 6, key, ret);
}

static void test_parse_errors(void) {
        JupyterMsg m, p, untouched = {};
        JupyterFrames f, fu;
        char bad_sig[65];
        int r;

        make_frames(KEY, &m, &f);
        untouched.header = json_object();

        is_int(jupyter_msg_parse((const void *const *) &f.part[1], &f.len[1], 5, KEY, &untouched), -EBADMSG,
               "parse: no delimiter");
        is_int(jupyter_msg_parse((const void *const *) f.part, f.len, 5, KEY, &untouched), -EBADMSG,
               "parse: too few frames after the delimiter");
        is_int(jupyter_msg_parse((const void *const *) f.part, f.len, 1, KEY, &untouched), -EBADMSG,
               "parse: only the delimiter");
        is_int(jupyter_msg_parse(NULL, NULL, 0, KEY, &untouched), -EBADMSG, "parse: no frames");

        snprintf(bad_sig, sizeof bad_sig, "%s", f.part[1]);
        bad_sig[10] = bad_sig[10] == '0' ? '1' : '0';
        is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM, "parse: one hex digit off: EPERM");
        bad_sig[10] = f.part[1][10];
        bad_sig[63] = '\0';
        is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM, "parse: truncated signature: EPERM");
        is_int(parse_modified(&f, 1, "", false, KEY, &untouched), -EPERM, "parse: empty signature: EPERM");
        snprintf(bad_sig, sizeof bad_sig, "%s", f.part[1]);
        for (char *s = bad_sig; *s; s++)
                if (*s >= 'a' && *s <= 'f')
                        *s = (char) (*s - 'a' + 'A');
        if (!streq(bad_sig, f.part[1]))
                is_int(parse_modified(&f, 1, bad_sig, false, KEY, &untouched), -EPERM,
                       "parse: upper-case signature is not Jupyter's: EPERM");
        is_int(parse_modified(&f, 0, NULL, false, OTHER_KEY, &untouched), -EPERM, "parse: wrong key: EPERM");
        is_int(parse_modified(&f, 5, "{\"code\":\"evil\"}", false, KEY, &untouched), -EPERM,
               "parse: tampered content: EPERM");
        is_int(parse_modified(&f, 3, "{\"msg_id\":\"other\"}", false, KEY, &untouched), -EPERM,
               "parse: tampered parent: EPERM");

        /* Well signed but not four JSON objects. */
        is_int(parse_modified(&f, 5, "[1,2]", true, KEY, &untouched), -EBADMSG, "parse: array content: EBADMSG");
        is_int(parse_modified(&f, 2, "\"header\"", true, KEY, &untouched), -EBADMSG, "parse: string header: EBADMSG");
        is_int(parse_modified(&f, 4, "null", true, KEY, &untouched), -EBADMSG, "parse: null metadata: EBADMSG");
        is_int(parse_modified(&f, 5, "{\"a\":", true, KEY, &untouched), -EBADMSG, "parse: invalid JSON: EBADMSG");
        is_int(parse_modified(&f, 3, "{} {}", true, KEY, &untouched), -EBADMSG, "parse: trailing data: EBADMSG");
        is_int(parse_modified(&f, 4, "", true, KEY, &untouched), -EBADMSG, "parse: empty frame: EBADMSG");
        ok(untouched.header && json_object_size(untouched.header) == 0 && !untouched.content,
           "parse: ret untouched on failure");

        /* An empty key disables signing, as in Jupyter. */
        r = jupyter_msg_serialize(&m, "", &fu);
        is_int(r, 0, "serialize with an empty key");
        if (r == 0) {
                is_int(fu.len[1], 0, "serialize: empty key gives an empty signature");
                is_str(fu.part[1], "", "serialize: empty signature text");
                r = parse_modified(&fu, 0, NULL, false, "", &p);
                is_int(r, 0, "parse: unsigned message with an empty key");
                if (r == 0) {
                        ok(json_equal(p.content, m.content), "parse: unsigned content equal");
                        jupyter_msg_done(&p);
                }
                r = parse_modified(&fu, 1, "whatever", false, "", &p);
                is_int(r, 0, "parse: empty key ignores the signature frame");
                if (r == 0)
                        jupyter_msg_done(&p);
                is_int(parse_modified(&fu, 0, NULL, false, KEY, &untouched), -EPERM,
                       "parse: unsigned message with a key: EPERM");
                is_int(parse_modified(&fu, 5, "7", false, "", &untouched), -EBADMSG,
                       "parse: empty key still needs objects");
                jupyter_frames_done(&fu);
        }

        json_decref(untouched.header);
        jupyter_frames_done(&f);
        jupyter_msg_done(&m);
}

/* ---- KernelConn: shared test machinery. ---- */

typedef struct Seen {
        uv_loop_t *loop;
        uv_timer_t safety;
        bool timed_out;

        unsigned replies[_CHANNEL_MAX];
        Channel reply_channel;
        char reply_type[64];
        char reply_parent[37];
        json_t *reply_content;

        unsigned iopub;
        char iopub_type[64];
        char iopub_parent[37];
        /* iopub "status" messages whose parent is want_parent. */
        char want_parent[37];
        unsigned status_for_want;

        unsigned hb;

        bool in_call;        /* set around kernel_conn_* calls */
        unsigned reentered;  /* callbacks that ran inside one: must stay 0 */
        bool close_on_reply; /* the reply callback closes its own connection */
        bool closed;
        /* Each kernel_info_reply sends another kernel_info_request until iopub
         * delivers something (see test_conn_live). */
        bool iopub_handshake;
        unsigned handshake_rounds;
} Seen;

static void on_reply(KernelConn *c, Channel channel, const JupyterMsg *msg, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->replies[channel]++;
        s->reply_channel = channel;
        snprintf(s->reply_type, sizeof s->reply_type, "%s", jupyter_msg_type(msg));
        snprintf(s->reply_parent, sizeof s->reply_parent, "%s", jupyter_msg_parent_id(msg));
        json_decref(s->reply_content);
        s->reply_content = json_incref(msg->content);
        if (s->close_on_reply) {
                kernel_conn_close(c);
                s->closed = true;
        } else if (s->iopub_handshake && s->iopub == 0 && streq(s->reply_type, "kernel_info_reply") &&
                   kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, NULL) >= 0)
                s->handshake_rounds++;
        uv_stop(s->loop);
}

static void on_iopub(KernelConn *c, const JupyterMsg *msg, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->iopub++;
        snprintf(s->iopub_type, sizeof s->iopub_type, "%s", jupyter_msg_type(msg));
        snprintf(s->iopub_parent, sizeof s->iopub_parent, "%s", jupyter_msg_parent_id(msg));
        if (streq(s->iopub_type, "status") && streq(s->iopub_parent, s->want_parent))
                s->status_for_want++;
        uv_stop(s->loop);
}

static void on_hb(KernelConn *c, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->hb++;
        uv_stop(s->loop);
}

static const KernelConnCallbacks callbacks = { on_reply, on_iopub, on_hb };

static void on_safety(uv_timer_t *t) {
        Seen *s = t->data;

        s->timed_out = true;
        uv_stop(s->loop);
}

/* Runs the loop until cond holds; a timer bounds the wait so that a broken
 * implementation fails the test instead of hanging it. */
#define RUN_UNTIL(s, cond)                                                                                            \
        ({                                                                                                            \
                (s)->timed_out = false;                                                                               \
                uv_timer_start(&(s)->safety, on_safety, SAFETY_TIMEOUT_MS, 0);                                        \
                while (!(cond) && !(s)->timed_out)                                                                    \
                        uv_run((s)->loop, UV_RUN_DEFAULT);                                                            \
                uv_timer_stop(&(s)->safety);                                                                          \
                (cond);                                                                                               \
        })

static void on_settled(uv_timer_t *t) {
        uv_stop(t->loop);
}

/* Lets the loop run for ms to give wrong callbacks a chance to show. Only
 * used to look for something that must NOT happen: a correct implementation
 * passes whatever the timing. */
static void run_for(Seen *s, uint64_t ms) {
        uv_timer_start(&s->safety, on_settled, ms, 0);
        uv_run(s->loop, UV_RUN_DEFAULT);
        uv_timer_stop(&s->safety);
}

static void seen_init(Seen *s, uv_loop_t *loop) {
        *s = (Seen){ .loop = loop };
        uv_timer_init(loop, &s->safety);
        s->safety.data = s;
}

/* ---- KernelConn against a fake kernel in this process. ---- */

typedef struct Fake {
        void *sock[_CHANNEL_MAX]; /* stdin stays NULL */
} Fake;

static void *fake_bind(void *ctx, int type, uint16_t port) {
        const int linger = 0, timeout = 10000;
        char endpoint[64];
        void *s = zmq_socket(ctx, type);

        if (!s)
                return NULL;
        snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", (unsigned) port);
        /* A receive timeout so a message that never comes fails the test instead of hanging it. */
        if (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
            zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout) < 0 || zmq_bind(s, endpoint) < 0) {
                zmq_close(s);
                return NULL;
        }
        return s;
}

/* Receives one multipart message of at most max frames (blocking, bounded by ZMQ_RCVTIMEO). */
static int fake_recv(void *sock, zmq_msg_t *parts, size_t max, size_t *ret_n) {
        size_t n = 0;
        bool more = true;

        while (more) {
                if (n == max) {
                        /* Too long for the caller: consume the rest and fail. */
                        for (size_t i = 0; i < n; i++)
                                zmq_msg_close(&parts[i]);
                        while (more) {
                                zmq_msg_t m;

                                zmq_msg_init(&m);
                                more = zmq_msg_recv(&m, sock, 0) >= 0 && zmq_msg_more(&m);
                                zmq_msg_close(&m);
                        }
                        return -EMSGSIZE;
                }
                zmq_msg_init(&parts[n]);
                if (zmq_msg_recv(&parts[n], sock, 0) < 0) {
                        int e = zmq_errno();
                        for (size_t i = 0; i <= n; i++)
                                zmq_msg_close(&parts[i]);
                        return -e;
                }
                more = zmq_msg_more(&parts[n]);
                n++;
        }
        *ret_n = n;
        return 0;
}

static void msgs_close(zmq_msg_t *parts, size_t n) {
        for (size_t i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
}

/* Receives a request on a fake ROUTER and parses it: ret_ident gets the routing id. */
static int fake_recv_request(void *sock, zmq_msg_t *ret_ident, JupyterMsg *ret) {
        zmq_msg_t parts[16];
        const void *frames[16];
        size_t lens[16], n;
        int r;

        r = fake_recv(sock, parts, ELEMENTSOF(parts), &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++)
                frames[i] = zmq_msg_data(&parts[i]), lens[i] = zmq_msg_size(&parts[i]);
        /* A DEALER request reaches the ROUTER as: identity, delimiter, signature, four dicts. */
        r = n == 7 ? jupyter_msg_parse(frames + 1, lens + 1, n - 1, KEY, ret) : -EBADMSG;
        if (r == 0) {
                zmq_msg_init(ret_ident);
                zmq_msg_copy(ret_ident, &parts[0]);
        }
        msgs_close(parts, n);
        return r;
}

static int fake_send_raw(void *sock, const zmq_msg_t *ident, const char *const *frames, const size_t *lens, size_t n) {
        if (ident &&
            zmq_send(sock, zmq_msg_data((zmq_msg_t *) ident), zmq_msg_size((zmq_msg_t *) ident), ZMQ_SNDMORE) < 0)
                return -zmq_errno();
        for (size_t i = 0; i < n; i++)
                if (zmq_send(sock, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
                        return -zmq_errno();
        return 0;
}

/* Sends a reply to req of type msg_type signed with key, through ident (NULL on PUB). */
static int fake_send_reply(void *sock, const zmq_msg_t *ident, const JupyterMsg *req, const char *msg_type,
                           json_t *content, const char *key) {
        JupyterMsg m;
        JupyterFrames f;
        int r;

        r = jupyter_msg_new(msg_type, "fake-kernel-session", content, &m);
        if (r < 0)
                return r;
        json_decref(m.parent_header);
        m.parent_header = json_deep_copy(req->header);
        r = jupyter_msg_serialize(&m, key, &f);
        jupyter_msg_done(&m);
        if (r < 0)
                return r;
        r = fake_send_raw(sock, ident, (const char *const *) f.part, f.len, 6);
        jupyter_frames_done(&f);
        return r;
}

static int fake_send_bad_replies(void *sock, const zmq_msg_t *ident, const JupyterMsg *req) {
        JupyterFrames f;
        JupyterMsg m;
        char sig[65];
        const char *garbage[] = { "no delimiter here" };
        int r;

        r = jupyter_msg_new("kernel_info_reply", "fake", NULL, &m);
        if (r < 0)
                return r;
        json_decref(m.parent_header);
        m.parent_header = json_deep_copy(req->header);
        r = jupyter_msg_serialize(&m, KEY, &f);
        jupyter_msg_done(&m);
        if (r < 0)
                return r;

        /* 1: a bad signature. */
        f.part[1][0] = f.part[1][0] == 'a' ? 'b' : 'a';
        r = fake_send_raw(sock, ident, (const char *const *) f.part, f.len, 6);
        f.part[1][0] = f.part[1][0] == 'a' ? 'b' : 'a';
        /* 2: no delimiter. */
        if (r >= 0)
                r = fake_send_raw(sock, ident, garbage, (size_t[]){ 17 }, 1);
        /* 3: too few frames. */
        if (r >= 0)
                r = fake_send_raw(sock, ident, (const char *const *) f.part, f.len, 5);
        /* 4: well signed, but the content is not an object. */
        if (r >= 0) {
                const char *parts[6] = { f.part[0], sig, f.part[2], f.part[3], f.part[4], "[]" };
                size_t lens[6] = { f.len[0], 64, f.len[2], f.len[3], f.len[4], 2 };

                jupyter_sign(KEY, &parts[2], &lens[2], sig);
                r = fake_send_raw(sock, ident, parts, lens, 6);
        }
        jupyter_frames_done(&f);
        return r;
}

static void fake_close(Fake *fk) {
        for (size_t i = 0; i < _CHANNEL_MAX; i++)
                if (fk->sock[i])
                        zmq_close(fk->sock[i]);
}

static void test_conn_fake(void) {
        uv_loop_t loop;
        void *ctx;
        Fake fk = {};
        Seen s;
        ConnectionInfo ci = { .ip = "127.0.0.1", .key = KEY }, bad;
        KernelConn *c = NULL, *c2 = NULL, *untouched = (KernelConn *) &fk;
        zmq_msg_t ident, cident, hb[3][2];
        JupyterMsg req, creq;
        char id[37] = "", cid[37] = "", id2[37];
        uint64_t payload[3];
        size_t n;
        int r;

        if (pick_ports(ci.ports) < 0) {
                ok(false, "fake: pick free ports");
                return;
        }
        ok(uv_loop_init(&loop) == 0, "fake: loop");
        ctx = zmq_ctx_new();
        seen_init(&s, &loop);

        /* Argument errors. */
        bad = ci;
        snprintf(bad.ip, sizeof bad.ip, "not-an-ip");
        is_int(kernel_conn_new(&loop, ctx, &bad, 0, &callbacks, &s, &untouched), -EINVAL, "new: bad ip");
        bad = ci;
        bad.ports[CHANNEL_HB] = 0;
        is_int(kernel_conn_new(&loop, ctx, &bad, 0, &callbacks, &s, &untouched), -EINVAL, "new: port 0");
        is_int(kernel_conn_new(NULL, ctx, &ci, 0, &callbacks, &s, &untouched), -EINVAL, "new: no loop");
        is_int(kernel_conn_new(&loop, NULL, &ci, 0, &callbacks, &s, &untouched), -EINVAL, "new: no zmq context");
        ok(untouched == (KernelConn *) &fk, "new: ret untouched on failure");

        r = kernel_conn_new(&loop, ctx, &ci, 0, &callbacks, &s, &c);
        is_int(r, 0, "new: connects to the fake kernel's ports");
        if (r < 0)
                goto out;

        is_int(kernel_conn_send(c, CHANNEL_IOPUB, "x", json_object(), NULL), -EINVAL, "send: not on iopub");
        is_int(kernel_conn_send(c, CHANNEL_HB, "x", json_object(), NULL), -EINVAL, "send: not on hb");
        is_int(kernel_conn_send(c, CHANNEL_STDIN, "x", json_object(), NULL), -EINVAL, "send: not on stdin");
        is_int(kernel_conn_send(c, CHANNEL_SHELL, NULL, json_object(), NULL), -EINVAL, "send: no msg_type");
        is_int(kernel_conn_send(c, CHANNEL_SHELL, "x", json_integer(3), NULL), -EINVAL, "send: content not a dict");

        /* Sent before anything listens: the DEALER must queue it and deliver it once connected. */
        s.in_call = true;
        r = kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, id);
        s.in_call = false;
        is_int(r, 0, "send: kernel_info_request before the kernel has bound");
        is_int(strlen(id), 36, "send: returns the msg_id");

        fk.sock[CHANNEL_SHELL] = fake_bind(ctx, ZMQ_ROUTER, ci.ports[CHANNEL_SHELL]);
        fk.sock[CHANNEL_CONTROL] = fake_bind(ctx, ZMQ_ROUTER, ci.ports[CHANNEL_CONTROL]);
        fk.sock[CHANNEL_IOPUB] = fake_bind(ctx, ZMQ_XPUB, ci.ports[CHANNEL_IOPUB]);
        fk.sock[CHANNEL_HB] = fake_bind(ctx, ZMQ_ROUTER, ci.ports[CHANNEL_HB]);
        ok(fk.sock[CHANNEL_SHELL] && fk.sock[CHANNEL_CONTROL] && fk.sock[CHANNEL_IOPUB] && fk.sock[CHANNEL_HB],
           "fake kernel bound");
        if (!fk.sock[CHANNEL_SHELL] || !fk.sock[CHANNEL_CONTROL] || !fk.sock[CHANNEL_IOPUB] || !fk.sock[CHANNEL_HB])
                goto out;

        r = fake_recv_request(fk.sock[CHANNEL_SHELL], &ident, &req);
        is_int(r, 0, "fake shell: got the early request, correctly signed");
        if (r < 0)
                goto out;
        is_str(jupyter_msg_type(&req), "kernel_info_request", "fake shell: msg_type");
        is_str(jupyter_msg_id(&req), id, "fake shell: msg_id is the one returned");

        s.in_call = true;
        r = kernel_conn_send(c, CHANNEL_CONTROL, "interrupt_request", NULL, cid);
        s.in_call = false;
        is_int(r, 0, "send on control");
        r = fake_recv_request(fk.sock[CHANNEL_CONTROL], &cident, &creq);
        is_int(r, 0, "fake control: got the request");
        if (r < 0) {
                jupyter_msg_done(&req);
                zmq_msg_close(&ident);
                goto out;
        }
        is_str(jupyter_msg_type(&creq), "interrupt_request", "fake control: msg_type");
        is_str(json_string_value(json_object_get(creq.header, "session")),
               json_string_value(json_object_get(req.header, "session")), "one session for shell and control");

        /* Four broken replies, then a good one: the good one arrives, the others are counted. */
        is_int(fake_send_bad_replies(fk.sock[CHANNEL_SHELL], &ident, &req), 0, "fake shell: bad replies sent");
        is_int(fake_send_reply(fk.sock[CHANNEL_SHELL], &ident, &req, "kernel_info_reply",
                               json_pack("{s:s}", "status", "ok"), KEY),
               0, "fake shell: reply sent");
        is_int(fake_send_reply(fk.sock[CHANNEL_CONTROL], &cident, &creq, "interrupt_reply", NULL, KEY), 0,
               "fake control: reply sent");
        ok(RUN_UNTIL(&s, s.replies[CHANNEL_SHELL] == 1 && s.replies[CHANNEL_CONTROL] == 1),
           "conn: replies on shell and on control");
        is_int(s.replies[CHANNEL_SHELL], 1, "conn: one reply on shell, the broken ones dropped");
        is_int(kernel_conn_dropped(c), 4, "conn: dropped and counted the 4 broken replies");
        if (s.reply_channel == CHANNEL_SHELL) {
                is_str(s.reply_parent, id, "conn: shell reply's parent is our request");
                is_str(s.reply_type, "kernel_info_reply", "conn: shell reply type");
        } else {
                is_str(s.reply_parent, cid, "conn: control reply's parent is our request");
                is_str(s.reply_type, "interrupt_reply", "conn: control reply type");
        }

        /* iopub: wait for the SUB's subscription to reach the XPUB, then publish. */
        {
                zmq_msg_t sub[16];

                r = fake_recv(fk.sock[CHANNEL_IOPUB], sub, ELEMENTSOF(sub), &n);
                ok(r == 0 && n == 1 && zmq_msg_size(&sub[0]) == 1 && ((char *) zmq_msg_data(&sub[0]))[0] == 1,
                   "iopub: subscribed to everything");
                if (r == 0)
                        msgs_close(sub, n);
        }
        snprintf(s.want_parent, sizeof s.want_parent, "%s", id);
        {
                /* A topic frame alone is a message without a delimiter: dropped. */
                const char *topic[] = { "kernel.fake.status" };

                is_int(fake_send_raw(fk.sock[CHANNEL_IOPUB], NULL, topic, (size_t[]){ strlen(topic[0]) }, 1), 0,
                       "fake iopub: topic-only message sent");
        }
        is_int(fake_send_reply(fk.sock[CHANNEL_IOPUB], NULL, &req, "status",
                               json_pack("{s:s}", "execution_state", "busy"), OTHER_KEY),
               0, "fake iopub: badly signed status sent");
        is_int(fake_send_reply(fk.sock[CHANNEL_IOPUB], NULL, &req, "status",
                               json_pack("{s:s}", "execution_state", "idle"), KEY),
               0, "fake iopub: status sent");
        ok(RUN_UNTIL(&s, s.iopub == 1), "iopub: one message delivered");
        is_str(s.iopub_type, "status", "iopub: type");
        is_int(s.status_for_want, 1, "iopub: status with our parent id");
        is_int(kernel_conn_dropped(c), 6, "iopub: the bad ones dropped and counted");

        /* hb: two pings; only the echo of the latest fires on_hb. */
        for (size_t i = 0; i < 2; i++) {
                s.in_call = true;
                is_int(kernel_conn_ping(c), 0, "ping %zu", i + 1);
                s.in_call = false;
                r = fake_recv(fk.sock[CHANNEL_HB], hb[i], 2, &n);
                ok(r == 0 && n == 2 && zmq_msg_size(&hb[i][1]) == 8, "fake hb: got ping %zu (identity, 8 bytes)",
                   i + 1);
                if (r < 0 || n != 2)
                        goto out_req;
                memcpy(&payload[i], zmq_msg_data(&hb[i][1]), 8);
        }
        ok(payload[0] != payload[1], "ping: payloads differ");
        /* Echo the old one, the latest, then both again. */
        for (size_t i = 0; i < 4; i++) {
                const char *p[] = { (const char *) &payload[i == 1 || i == 2] };

                fake_send_raw(fk.sock[CHANNEL_HB], &hb[0][0], p, (size_t[]){ 8 }, 1);
        }
        ok(RUN_UNTIL(&s, s.hb == 1), "hb: echo of the latest ping fires on_hb");
        s.in_call = true;
        is_int(kernel_conn_ping(c), 0, "ping 3");
        s.in_call = false;
        r = fake_recv(fk.sock[CHANNEL_HB], hb[2], 2, &n);
        ok(r == 0 && n == 2, "fake hb: got ping 3");
        if (r < 0 || n != 2)
                goto out_hb;
        memcpy(&payload[2], zmq_msg_data(&hb[2][1]), 8);
        {
                /* A stale echo, then the right one. */
                const char *p0[] = { (const char *) &payload[0] }, *p2[] = { (const char *) &payload[2] };

                fake_send_raw(fk.sock[CHANNEL_HB], &hb[0][0], p0, (size_t[]){ 8 }, 1);
                fake_send_raw(fk.sock[CHANNEL_HB], &hb[0][0], p2, (size_t[]){ 8 }, 1);
        }
        ok(RUN_UNTIL(&s, s.hb == 2), "hb: second round");
        run_for(&s, 100);
        is_int(s.hb, 2, "hb: stale and repeated echoes never fire on_hb");
        is_int(kernel_conn_dropped(c), 6, "hb: echoes are not counted as dropped");
        msgs_close(hb[2], 2);

        /* A reply waits in the connection (its ZMQ_FD has fired, the loop has
         * not run) when we send: no callback may run inside the send, and as
         * the send makes libzmq swallow the fd's edge, the connection must
         * still come back for the reply on its own. */
        uv_run(&loop, UV_RUN_NOWAIT);
        s.replies[CHANNEL_SHELL] = 0;
        is_int(fake_send_reply(fk.sock[CHANNEL_SHELL], &ident, &req, "kernel_info_reply", NULL, KEY), 0,
               "fake shell: reply sent while the loop is not running");
        ok(poll(&(struct pollfd){ .fd = uv_backend_fd(&loop), .events = POLLIN }, 1, SAFETY_TIMEOUT_MS) == 1,
           "the connection has been signalled");
        s.in_call = true;
        r = kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, id2);
        s.in_call = false;
        is_int(r, 0, "send with a reply waiting");
        is_int(s.replies[CHANNEL_SHELL], 0, "no callback from inside the send");
        ok(RUN_UNTIL(&s, s.replies[CHANNEL_SHELL] == 1), "the waiting reply is delivered after the send");
        {
                JupyterMsg req3;
                zmq_msg_t ident3;

                r = fake_recv_request(fk.sock[CHANNEL_SHELL], &ident3, &req3);
                is_int(r, 0, "fake shell: got the request sent meanwhile");
                if (r == 0) {
                        is_str(jupyter_msg_id(&req3), id2, "fake shell: its msg_id");
                        jupyter_msg_done(&req3);
                        zmq_msg_close(&ident3);
                }
        }
out_hb:
        msgs_close(hb[0], 2);
        msgs_close(hb[1], 2);

        /* Close from inside a callback with a second reply queued: nothing after close. */
        s.close_on_reply = true;
        s.replies[CHANNEL_SHELL] = 0;
        fake_send_reply(fk.sock[CHANNEL_SHELL], &ident, &req, "kernel_info_reply", NULL, KEY);
        fake_send_reply(fk.sock[CHANNEL_SHELL], &ident, &req, "kernel_info_reply", NULL, KEY);
        if (ok(RUN_UNTIL(&s, s.closed), "close from a callback"))
                c = NULL; /* freed by its close callbacks */
        run_for(&s, 100);
        is_int(s.replies[CHANNEL_SHELL], 1, "no callback after close from a callback");
        s.close_on_reply = false;

        /* Close with a reply on its way: it is never delivered. */
        r = kernel_conn_new(&loop, ctx, &ci, 0, &callbacks, &s, &c2);
        is_int(r, 0, "second connection");
        if (r == 0) {
                JupyterMsg req2;
                zmq_msg_t ident2;

                is_int(kernel_conn_send(c2, CHANNEL_SHELL, "kernel_info_request", NULL, id2), 0, "second: send");
                r = fake_recv_request(fk.sock[CHANNEL_SHELL], &ident2, &req2);
                is_int(r, 0, "second: fake got it");
                if (r == 0) {
                        is_str(jupyter_msg_id(&req2), id2, "second: its msg_id");
                        fake_send_reply(fk.sock[CHANNEL_SHELL], &ident2, &req2, "kernel_info_reply", NULL, KEY);
                        jupyter_msg_done(&req2);
                        zmq_msg_close(&ident2);
                }
                s.replies[CHANNEL_SHELL] = 0;
                kernel_conn_close(c2);
                /* Until the loop runs the close callbacks the memory is still there:
                 * this is what a callback that closed its own connection would see. */
                is_int(kernel_conn_send(c2, CHANNEL_SHELL, "x", json_object(), NULL), -ESHUTDOWN,
                       "send after close: ESHUTDOWN");
                is_int(kernel_conn_ping(c2), -ESHUTDOWN, "ping after close: ESHUTDOWN");
                kernel_conn_close(c2); /* twice is harmless */
                run_for(&s, 100);
                is_int(s.replies[CHANNEL_SHELL], 0, "no callback after close");
        }
        kernel_conn_close(NULL);
        is_int(kernel_conn_dropped(NULL), 0, "dropped(NULL)");
        is_int(s.reentered, 0, "no callback ran inside a kernel_conn_* call");

out_req:
        jupyter_msg_done(&req);
        jupyter_msg_done(&creq);
        zmq_msg_close(&ident);
        zmq_msg_close(&cident);
out:
        kernel_conn_close(c);
        fake_close(&fk);
        json_decref(s.reply_content);
        uv_close((uv_handle_t *) &s.safety, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(zmq_ctx_term(ctx), 0, "fake: zmq_ctx_term");
        is_int(uv_loop_close(&loop), 0, "fake: uv_loop_close, nothing left on the loop");
}

/* ---- KernelConn against a real ipykernel. ---- */

static char tmpdir[] = "/tmp/test-jupyter.XXXXXX";
static bool have_tmpdir;
static pid_t kernel_pid = -1;
static char conn_path[128], log_path[128];

/* Kills the kernel's process group whatever happened, so nothing is left behind. */
static void cleanup(void) {
        if (kernel_pid > 0) {
                (void) kill(-kernel_pid, SIGKILL);
                (void) waitpid(kernel_pid, NULL, 0);
                kernel_pid = -1;
        }
        if (have_tmpdir) {
                (void) unlink(conn_path);
                (void) unlink(log_path);
                (void) rmdir(tmpdir);
                have_tmpdir = false;
        }
}

static void diag_kernel_log(void) {
        _cleanup_free_ char *text = NULL;

        if (read_file(log_path, 16384, &text, NULL) < 0)
                return;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
                printf("# kernel: %s\n", line);
}

static int write_connection_file(const ConnectionInfo *ci) {
        /* The daemon's own writer: the same JSON a kernel gets from kernelsupd. */
        return connection_file_write(conn_path, ci, (uid_t) -1, (gid_t) -1);
}

/* Forks the kernel held at a gate: it execs only when a byte arrives on the
 * returned fd, so the test can send its first request before the kernel
 * exists. The fork happens before any libzmq thread runs. */
static int spawn_kernel_gated(int *ret_gate) {
        char *argv[] = { (char *) "/usr/bin/python3",
                         (char *) "-m",
                         (char *) "ipykernel_launcher",
                         (char *) "-f",
                         conn_path,
                         (char *) "--HistoryManager.hist_file=:memory:",
                         NULL };
        _cleanup_close_ int log_fd = -1, null_fd = -1;
        int gate[2];
        pid_t pid;

        log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (log_fd < 0 || null_fd < 0)
                return -errno;
        if (pipe2(gate, O_CLOEXEC) < 0)
                return -errno;
        /* ipykernel 6.17 exits when orphaned if this is set (doc/design.md, section 4). */
        unsetenv("JPY_PARENT_PID");

        pid = fork();
        if (pid < 0) {
                int e = -errno;
                close(gate[0]);
                close(gate[1]);
                return e;
        }
        if (pid == 0) {
                char c;

                /* Only async-signal-safe calls from here on. */
                close(gate[1]);
                (void) setsid();
                if (read(gate[0], &c, 1) != 1)
                        _exit(126);
                /* The kernel prints a note on stdout, which would break TAP. */
                if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        close(gate[0]);
        kernel_pid = pid;
        *ret_gate = gate[1];
        return 0;
}

/* Waits (bounded) for the kernel to exit on its own; its status or -ETIMEDOUT. */
static int wait_kernel_exit(int *ret_status) {
        for (unsigned i = 0; i < SAFETY_TIMEOUT_MS / 10; i++) {
                pid_t p = waitpid(kernel_pid, ret_status, WNOHANG);

                if (p == kernel_pid) {
                        /* Its group may still hold stray children: take them too. */
                        (void) kill(-kernel_pid, SIGKILL);
                        kernel_pid = -1;
                        return 0;
                }
                if (p < 0)
                        return -errno;
                nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        }
        return -ETIMEDOUT;
}

static void test_conn_live(void) {
        ConnectionInfo ci = { .ip = "127.0.0.1" };
        uv_loop_t loop;
        void *ctx = NULL;
        KernelConn *c = NULL;
        Seen s;
        char ki_id[37] = "", ex_id[37] = "", ue_id[37] = "", sd_id[37] = "";
        int gate = -1, status = 0, r;
        uint8_t key[KEY_BYTES];

        if (system("/usr/bin/python3 -c 'import ipykernel' >/dev/null 2>&1") != 0) {
                skip("live: /usr/bin/python3 cannot import ipykernel");
                return;
        }
        if (!mkdtemp(tmpdir)) {
                ok(false, "live: mkdtemp: %s", strerror(errno));
                return;
        }
        have_tmpdir = true;
        snprintf(conn_path, sizeof conn_path, "%s/kernel.json", tmpdir);
        snprintf(log_path, sizeof log_path, "%s/kernel.log", tmpdir);

        if (random_bytes(key, sizeof key) < 0 || pick_ports(ci.ports) < 0) {
                ok(false, "live: key and ports");
                return;
        }
        hex_encode(key, sizeof key, ci.key);
        is_int(write_connection_file(&ci), 0, "live: connection file written");
        r = spawn_kernel_gated(&gate);
        is_int(r, 0, "live: kernel forked");
        if (r < 0)
                return;

        ok(uv_loop_init(&loop) == 0, "live: loop");
        seen_init(&s, &loop);
        ctx = zmq_ctx_new();
        r = kernel_conn_new(&loop, ctx, &ci, 0, &callbacks, &s, &c);
        is_int(r, 0, "live: kernel_conn_new");
        if (r < 0) {
                close(gate);
                goto out;
        }

        /* Sent while the kernel is not even running yet. */
        r = kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, ki_id);
        is_int(r, 0, "live: kernel_info_request sent before the kernel has bound");
        ok(write(gate, "x", 1) == 1, "live: kernel released");
        close(gate);

        if (!ok(RUN_UNTIL(&s, streq(s.reply_parent, ki_id)), "live: kernel_info_reply for our request")) {
                diag_kernel_log();
                goto out;
        }
        is_int(s.reply_channel, CHANNEL_SHELL, "live: on shell");
        is_str(s.reply_type, "kernel_info_reply", "live: type");
        is_str(json_string_value(json_object_get(s.reply_content, "status")), "ok", "live: status ok");
        {
                const char *v = json_string_value(json_object_get(s.reply_content, "protocol_version"));
                ok(v && strncmp(v, "5.", 2) == 0, "live: protocol_version 5.x (%s)", v ? v : "(null)");
        }

        /* A SUB gets nothing published before its subscription reaches the
         * kernel, and it reconnects on its own schedule: a reply on shell says
         * nothing about iopub. As jupyter_client does, ask again (each request
         * makes the kernel publish busy/idle) until iopub delivers. */
        s.iopub_handshake = true;
        r = kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, NULL);
        is_int(r, 0, "live: kernel_info_request for the iopub handshake");
        ok(RUN_UNTIL(&s, s.iopub > 0), "live: iopub delivers");
        s.iopub_handshake = false;
        printf("# iopub handshake: %u extra kernel_info rounds\n", s.handshake_rounds);

        r = kernel_conn_send(c, CHANNEL_SHELL, "execute_request",
                             json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", "x=6*7", "silent", 0,
                                       "store_history", 1, "user_expressions", "allow_stdin", 0, "stop_on_error", 1),
                             ex_id);
        is_int(r, 0, "live: execute_request sent");
        snprintf(s.want_parent, sizeof s.want_parent, "%s", ex_id);
        ok(RUN_UNTIL(&s, streq(s.reply_parent, ex_id) && s.status_for_want > 0),
           "live: execute_reply and an iopub status for our request");
        is_str(s.reply_type, "execute_reply", "live: execute_reply type");
        is_str(json_string_value(json_object_get(s.reply_content, "status")), "ok", "live: execute status ok");

        /* The namespace is there: read x back through user_expressions. */
        r = kernel_conn_send(c, CHANNEL_SHELL, "execute_request",
                             json_pack("{s:s, s:b, s:b, s:{s:s}, s:b, s:b}", "code", "", "silent", 1, "store_history",
                                       0, "user_expressions", "v", "x", "allow_stdin", 0, "stop_on_error", 1),
                             ue_id);
        is_int(r, 0, "live: user_expressions request sent");
        ok(RUN_UNTIL(&s, streq(s.reply_parent, ue_id)), "live: its reply");
        is_str(json_string_value(json_object_get(
                       json_object_get(json_object_get(json_object_get(s.reply_content, "user_expressions"), "v"),
                                       "data"),
                       "text/plain")),
               "42", "live: x == 42 in the kernel");

        is_int(kernel_conn_ping(c), 0, "live: ping");
        ok(RUN_UNTIL(&s, s.hb == 1), "live: heartbeat echoed");

        r = kernel_conn_send(c, CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0), sd_id);
        is_int(r, 0, "live: shutdown_request sent on control");
        ok(RUN_UNTIL(&s, streq(s.reply_parent, sd_id)), "live: shutdown_reply");
        is_int(s.reply_channel, CHANNEL_CONTROL, "live: on control");
        is_str(s.reply_type, "shutdown_reply", "live: shutdown_reply type");

        r = wait_kernel_exit(&status);
        is_int(r, 0, "live: the kernel exited");
        if (r == 0)
                ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "live: cleanly (status 0x%x)", (unsigned) status);
        is_int(kernel_conn_dropped(c), 0, "live: nothing dropped");
        is_int(s.reentered, 0, "live: no callback inside a call");

out:
        kernel_conn_close(c);
        json_decref(s.reply_content);
        uv_close((uv_handle_t *) &s.safety, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        if (ctx)
                is_int(zmq_ctx_term(ctx), 0, "live: zmq_ctx_term");
        is_int(uv_loop_close(&loop), 0, "live: uv_loop_close, nothing left on the loop");
}

int main(void) {
        atexit(cleanup);

        test_sign_vectors();
        test_msg_new();
        test_roundtrip();
        test_parse_errors();
        test_conn_fake();
        test_conn_live();

        cleanup();
        return tap_done();
}

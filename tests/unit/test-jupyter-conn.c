/* Tests of a KernelConn against an in-process fake kernel, to reach its
 * error paths on purpose (bad replies, oversized frames, closing inside a
 * callback, no callback inside a call). */
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
#include "jupyter-world.h"

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

/* The loop of the KernelConn under test: it runs in this thread, so the fake turns it while it waits. */
static uv_loop_t *fake_pump;

/* Waits up to 10 s for a message on sock, running the loop meanwhile (our side connects and writes on it). */
static int fake_wait(void *sock) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 10 * USEC_PER_SEC;
        zmq_pollitem_t item = { .socket = sock, .events = ZMQ_POLLIN };

        while (now_usec(CLOCK_MONOTONIC) < deadline) {
                if (fake_pump)
                        (void) uv_run(fake_pump, UV_RUN_NOWAIT);
                if (zmq_poll(&item, 1, 1) > 0)
                        return 0;
        }
        return -EAGAIN;
}

/* Receives one multipart message of at most max frames (waiting up to 10 s for its first frame). */
static int fake_recv(void *sock, zmq_msg_t *parts, size_t max, size_t *ret_n) {
        size_t n = 0;
        bool more = true;

        if (fake_wait(sock) < 0)
                return -EAGAIN;

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
        zmq_msg_t ident, cident, hb[3][3];
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
        fake_pump = &loop;
        ctx = zmq_ctx_new();
        seen_init(&s, &loop);

        /* Argument errors. */
        bad = ci;
        snprintf(bad.ip, sizeof bad.ip, "not-an-ip");
        is_int(kernel_conn_new(&loop, &bad, 0, &callbacks, &s, &untouched), -EINVAL, "new: bad ip");
        bad = ci;
        bad.ports[CHANNEL_HB] = 0;
        is_int(kernel_conn_new(&loop, &bad, 0, &callbacks, &s, &untouched), -EINVAL, "new: port 0");
        is_int(kernel_conn_new(NULL, &ci, 0, &callbacks, &s, &untouched), -EINVAL, "new: no loop");
        is_int(kernel_conn_new(&loop, NULL, 0, &callbacks, &s, &untouched), -EINVAL, "new: no connection info");
        ok(untouched == (KernelConn *) &fk, "new: ret untouched on failure");

        r = kernel_conn_new(&loop, &ci, 0, &callbacks, &s, &c);
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
        is_int(s.unreadable[CHANNEL_IOPUB], 2, "iopub: both reported unreadable (the journal cannot miss them)");

        /* hb: two pings; only the echo of the latest fires on_hb. Each is [delimiter, payload], as a REQ sends
         * it, so that a REP heartbeat (IRkernel, tslab) answers too. */
        for (size_t i = 0; i < 2; i++) {
                s.in_call = true;
                is_int(kernel_conn_ping(c), 0, "ping %zu", i + 1);
                s.in_call = false;
                r = fake_recv(fk.sock[CHANNEL_HB], hb[i], 3, &n);
                ok(r == 0 && n == 3 && zmq_msg_size(&hb[i][1]) == 0 && zmq_msg_size(&hb[i][2]) == 8,
                   "fake hb: got ping %zu (identity, empty delimiter, 8 bytes)", i + 1);
                if (r < 0 || n != 3)
                        goto out_req;
                memcpy(&payload[i], zmq_msg_data(&hb[i][2]), 8);
        }
        ok(payload[0] != payload[1], "ping: payloads differ");
        /* Ping 1 went unanswered: ping 2 came over a new connection, as jupyter_client opens a new socket. */
        ok(zmq_msg_size(&hb[0][0]) != zmq_msg_size(&hb[1][0]) ||
                   memcmp(zmq_msg_data(&hb[0][0]), zmq_msg_data(&hb[1][0]), zmq_msg_size(&hb[0][0])) != 0,
           "ping after a missed one: a new connection (another identity)");
        is_int(kernel_conn_hb_fresh(c), 1, "hb: one fresh connection counted");
        /* Echo the old one, the latest, then both again, on the connection that is left. */
        for (size_t i = 0; i < 4; i++) {
                const char *p[] = { "", (const char *) &payload[i == 1 || i == 2] };

                fake_send_raw(fk.sock[CHANNEL_HB], &hb[1][0], p, (size_t[]){ 0, 8 }, 2);
        }
        ok(RUN_UNTIL(&s, s.hb == 1), "hb: echo of the latest ping fires on_hb");
        s.in_call = true;
        is_int(kernel_conn_ping(c), 0, "ping 3");
        s.in_call = false;
        r = fake_recv(fk.sock[CHANNEL_HB], hb[2], 3, &n);
        ok(r == 0 && n == 3, "fake hb: got ping 3");
        if (r < 0 || n != 3)
                goto out_hb;
        memcpy(&payload[2], zmq_msg_data(&hb[2][2]), 8);
        ok(zmq_msg_size(&hb[2][0]) == zmq_msg_size(&hb[1][0]) &&
                   memcmp(zmq_msg_data(&hb[2][0]), zmq_msg_data(&hb[1][0]), zmq_msg_size(&hb[1][0])) == 0,
           "ping after an answered one: the same connection");
        {
                /* A stale echo, then the right one without a delimiter (a kernel that echoes only the payload). */
                const char *p0[] = { "", (const char *) &payload[0] }, *p2[] = { (const char *) &payload[2] };

                fake_send_raw(fk.sock[CHANNEL_HB], &hb[2][0], p0, (size_t[]){ 0, 8 }, 2);
                fake_send_raw(fk.sock[CHANNEL_HB], &hb[2][0], p2, (size_t[]){ 8 }, 1);
        }
        ok(RUN_UNTIL(&s, s.hb == 2), "hb: second round");
        {
                /* A first frame that is no delimiter is no echo of ours. */
                const char *not_delim[] = { "x", (const char *) &payload[2] };

                fake_send_raw(fk.sock[CHANNEL_HB], &hb[2][0], not_delim, (size_t[]){ 1, 8 }, 2);
        }
        run_for(&s, 100);
        is_int(s.hb, 2, "hb: stale, repeated and malformed echoes never fire on_hb");
        is_int(kernel_conn_dropped(c), 6, "hb: echoes are not counted as dropped");
        msgs_close(hb[2], 3);

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
        msgs_close(hb[0], 3);
        msgs_close(hb[1], 3);

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
        r = kernel_conn_new(&loop, &ci, 0, &callbacks, &s, &c2);
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
        fake_pump = NULL;
        is_int(uv_loop_close(&loop), 0, "fake: uv_loop_close, nothing left on the loop");
}

/* ---- A listener that is no kernel's ---- */

typedef struct NotKernel {
        uv_tcp_t server;
        unsigned accepted;
} NotKernel;

static void not_kernel_closed(uv_handle_t *h) {
        free(h);
}

/* Each connection gets a line that is no ZMTP greeting and is closed. */
static void not_kernel_on_connection(uv_stream_t *server, int status) {
        static const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
        NotKernel *nk = server->data;
        uv_tcp_t *peer = malloc(sizeof *peer);
        uv_buf_t b = uv_buf_init((char *) reply, sizeof reply - 1);

        if (status < 0 || !peer || uv_tcp_init(server->loop, peer) < 0) {
                free(peer);
                return;
        }
        if (uv_accept(server, (uv_stream_t *) peer) == 0) {
                nk->accepted++;
                (void) uv_try_write((uv_stream_t *) peer, &b, 1);
        }
        uv_close((uv_handle_t *) peer, not_kernel_closed);
}

/* The shell port answers with what is no ZMTP, each time: the connection is tried again with a wait that doubles
 * (10 ms up to 1.28 s), not every 10 ms, and nothing is reported dropped (nothing was up). */
static void test_conn_not_a_kernel(void) {
        ConnectionInfo ci = { .ip = "127.0.0.1", .key = KEY };
        struct sockaddr_in addr;
        uv_loop_t loop;
        NotKernel nk = {};
        KernelConn *c = NULL;
        Seen s;

        if (pick_ports(ci.ports) < 0) {
                ok(false, "not a kernel: pick free ports");
                return;
        }
        ok(uv_loop_init(&loop) == 0, "not a kernel: loop");
        seen_init(&s, &loop);
        uv_tcp_init(&loop, &nk.server);
        nk.server.data = &nk;
        uv_ip4_addr("127.0.0.1", ci.ports[CHANNEL_SHELL], &addr);
        ok(uv_tcp_bind(&nk.server, (const struct sockaddr *) &addr, 0) == 0 &&
                   uv_listen((uv_stream_t *) &nk.server, 128, not_kernel_on_connection) == 0,
           "not a kernel: a listener on the shell port");
        is_int(kernel_conn_new(&loop, &ci, 0, &callbacks, &s, &c), 0, "not a kernel: kernel_conn_new");
        run_for(&s, 1000);
        printf("# not a kernel: %u connections in 1 s\n", nk.accepted);
        ok(nk.accepted >= 1 && nk.accepted <= 12,
           "not a kernel: tried again with a doubling wait (at most 12 connections in 1 s, not 100)");
        is_int(s.dropped[CHANNEL_SHELL] + kernel_conn_reconnects(c), 0,
               "not a kernel: nothing reported dropped, no reconnect counted (it never was up)");
        kernel_conn_close(c);
        uv_close((uv_handle_t *) &nk.server, NULL);
        uv_close((uv_handle_t *) &s.safety, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&loop), 0, "not a kernel: uv_loop_close, nothing left on the loop");
}

int main(void) {
        test_conn_fake();
        test_conn_not_a_kernel();

        return tap_done();
}

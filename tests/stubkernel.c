/* A stub Jupyter kernel for tests and benchmarks that need many kernels: it
 * binds the five ports (or Unix sockets) of a connection file, echoes the heartbeat, answers
 * kernel_info_request and execute_request on shell (publishing busy/idle on
 * iopub, as a real kernel does), and exits on shutdown_request (broadcasting
 * its shutdown_reply on iopub too, as ipykernel does). A few MiB
 * each instead of ipykernel's ~50.
 *   stubkernel [--exit CODE] [--ignore-shutdown] [--ignore-term] [--rep-heartbeat] -f CONNECTION_FILE
 * For the stop escalation and the restart policy, it can misbehave: exit at
 * once with CODE, answer shutdown_request but keep running, ignore SIGTERM.
 * --rep-heartbeat makes the heartbeat a REP socket, as IRkernel's and tslab's
 * are: it drops a ping that lacks the REQ delimiter frame.
 * Two cells behave otherwise: "abort" is answered status "abort" without an
 * execution_count (as tslab answers a cell it aborted), and "hang" runs until an
 * interrupt_request comes on control (SIGINT is ignored), then ends with a
 * KeyboardInterrupt error. "input" asks for input as IRkernel's readline() does,
 * whatever allow_stdin says: an input_request on stdin to the routing identity of
 * the shell request, then it waits for the input_reply (at most 30 s) and prints
 * "input: VALUE." on stdout, or "input: no reply." when none came.
 * For the heartbeat: SIGUSR1 makes it stop answering heartbeat pings (as a
 * kernel stuck in C code with its GIL held), SIGUSR2 makes it answer again. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "connfile.h"
#include "jupyter.h"
#include "util.h"

static const char *key;
static void *stdin_sock;
static const char *session = "stubkernel";
static bool ignore_shutdown;
static volatile sig_atomic_t hb_silent; /* SIGUSR1 sets it, SIGUSR2 clears it */

static void on_hb_signal(int sig) {
        hb_silent = sig == SIGUSR1;
}

/* The "hang" cell: its request (frames kept, parsed into req) until an interrupt_request ends it. */
static struct {
        bool running;
        zmq_msg_t frames[32];
        int n, ids;
        JupyterMsg req;
        void *sock;
} hang;

/* Receives one multipart message: up to max frames (longer ones are cut). */
static int recv_multipart(void *sock, zmq_msg_t *frames, int max) {
        int n = 0, more;

        do {
                zmq_msg_init(&frames[n < max ? n : max - 1]);
                if (zmq_msg_recv(&frames[n < max ? n : max - 1], sock, 0) < 0)
                        return -errno;
                more = zmq_msg_more(&frames[n < max ? n : max - 1]);
                if (n < max)
                        n++;
                else
                        zmq_msg_close(&frames[max - 1]);
        } while (more);
        return n;
}

/* Sends msg with the routing identities ids[0..n_ids). */
static void send_msg(void *sock, zmq_msg_t *ids, int n_ids, const JupyterMsg *msg) {
        JupyterFrames f;

        if (jupyter_msg_serialize(msg, key, &f) < 0)
                return;
        for (int i = 0; i < n_ids; i++)
                zmq_send(sock, zmq_msg_data(&ids[i]), zmq_msg_size(&ids[i]), ZMQ_SNDMORE);
        for (int i = 0; i < 6; i++)
                zmq_send(sock, f.part[i], f.len[i], i < 5 ? ZMQ_SNDMORE : 0);
        jupyter_frames_done(&f);
}

/* A message of type whose parent is req. content is stolen. */
static void reply(void *sock, zmq_msg_t *ids, int n_ids, const JupyterMsg *req, const char *type, json_t *content) {
        JupyterMsg m;

        if (jupyter_msg_new(type, session, content, &m) < 0)
                return;
        json_decref(m.parent_header);
        m.parent_header = json_incref(req->header);
        send_msg(sock, ids, n_ids, &m);
        jupyter_msg_done(&m);
}

static void publish_status(void *iopub, const JupyterMsg *req, const char *state) {
        reply(iopub, NULL, 0, req, "status", json_pack("{s:s}", "execution_state", state));
}

/* The "input" cell: asks the client (ids, the shell request's identities) on stdin, and prints what it answered. */
static void ask_input(zmq_msg_t *ids, int n_ids, const JupyterMsg *req, void *iopub) {
        zmq_pollitem_t item = { stdin_sock, 0, ZMQ_POLLIN, 0 };
        zmq_msg_t frames[32];
        const void *parts[32];
        size_t lens[32];
        JupyterMsg rep;
        char text[256] = "input: no reply.\n";
        int n, first = 0;

        reply(stdin_sock, ids, n_ids, req, "input_request", json_pack("{s:s, s:b}", "prompt", "? ", "password", 0));
        if (zmq_poll(&item, 1, 30000) == 1 && (n = recv_multipart(stdin_sock, frames, 32)) > 0) {
                for (int i = 0; i < n; i++) {
                        parts[i] = zmq_msg_data(&frames[i]);
                        lens[i] = zmq_msg_size(&frames[i]);
                        if (lens[i] == strlen(JUPYTER_DELIM) && memcmp(parts[i], JUPYTER_DELIM, lens[i]) == 0)
                                first = i;
                }
                if (jupyter_msg_parse(parts + first, lens + first, (size_t) (n - first), key, &rep) >= 0) {
                        snprintf(text, sizeof text, "input: %s.\n",
                                 json_string_value(json_object_get(rep.content, "value")) ?: "(none)");
                        jupyter_msg_done(&rep);
                }
                for (int i = 0; i < n; i++)
                        zmq_msg_close(&frames[i]);
        }
        reply(iopub, NULL, 0, req, "stream", json_pack("{s:s, s:s}", "name", "stdout", "text", text));
}

/* Handles one request on a ROUTER (shell or control). Returns 1 on shutdown. */
static int handle(void *sock, void *iopub, int *count) {
        zmq_msg_t frames[32];
        const void *parts[32];
        size_t lens[32];
        JupyterMsg req;
        int n, ids = 0, r = 0;

        n = recv_multipart(sock, frames, 32);
        if (n < 0)
                return 0;
        for (int i = 0; i < n; i++) {
                parts[i] = zmq_msg_data(&frames[i]);
                lens[i] = zmq_msg_size(&frames[i]);
                if (ids == i && !(lens[i] == strlen(JUPYTER_DELIM) && memcmp(parts[i], JUPYTER_DELIM, lens[i]) == 0))
                        ids = i + 1;
        }
        if (jupyter_msg_parse(parts, lens, (size_t) n, key, &req) >= 0) {
                const char *type = jupyter_msg_type(&req);
                publish_status(iopub, &req, "busy");
                if (streq(type, "kernel_info_request"))
                        reply(sock, frames, ids, &req, "kernel_info_reply",
                              json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}, s:s}", "status", "ok", "protocol_version",
                                        JUPYTER_PROTOCOL_VERSION, "implementation", "stubkernel",
                                        "implementation_version", "1", "language_info", "name", "stub", "version", "1",
                                        "banner", "stub kernel"));
                else if (streq(type, "execute_request")) {
                        const char *code = json_string_value(json_object_get(req.content, "code")) ?: "";

                        if (streq(code, "abort"))
                                reply(sock, frames, ids, &req, "execute_reply", json_pack("{s:s}", "status", "abort"));
                        else if (streq(code, "hang") && !hang.running) {
                                /* Its frames stay ours until the interrupt: req points into them. */
                                ++*count;
                                hang.running = true;
                                memcpy(hang.frames, frames, sizeof frames[0] * (size_t) n);
                                hang.n = n;
                                hang.ids = ids;
                                hang.req = req;
                                hang.sock = sock;
                                return 0;
                        } else {
                                ++*count;
                                if (streq(code, "input"))
                                        ask_input(frames, ids, &req, iopub);
                                reply(sock, frames, ids, &req, "execute_reply",
                                      json_pack("{s:s, s:i, s:{}, s:[]}", "status", "ok", "execution_count", *count,
                                                "user_expressions", "payload"));
                        }
                } else if (streq(type, "shutdown_request")) {
                        reply(sock, frames, ids, &req, "shutdown_reply",
                              json_pack("{s:s, s:b}", "status", "ok", "restart", 0));
                        /* ipykernel tells every client: the same content on iopub. */
                        reply(iopub, NULL, 0, &req, "shutdown_reply",
                              json_pack("{s:s, s:b}", "status", "ok", "restart", 0));
                        r = !ignore_shutdown;
                } else if (streq(type, "interrupt_request")) {
                        reply(sock, frames, ids, &req, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
                        if (hang.running) {
                                reply(iopub, NULL, 0, &hang.req, "error",
                                      json_pack("{s:s, s:s, s:[s]}", "ename", "KeyboardInterrupt", "evalue", "",
                                                "traceback", "KeyboardInterrupt"));
                                reply(hang.sock, hang.frames, hang.ids, &hang.req, "execute_reply",
                                      json_pack("{s:s, s:i, s:s, s:s, s:[]}", "status", "error", "execution_count",
                                                *count, "ename", "KeyboardInterrupt", "evalue", "", "traceback"));
                                publish_status(iopub, &hang.req, "idle");
                                jupyter_msg_done(&hang.req);
                                for (int i = 0; i < hang.n; i++)
                                        zmq_msg_close(&hang.frames[i]);
                                hang.running = false;
                        }
                }
                publish_status(iopub, &req, "idle");
                jupyter_msg_done(&req);
        }
        for (int i = 0; i < n; i++)
                zmq_msg_close(&frames[i]);
        return r;
}

/* The heartbeat is a ROUTER echo, as ipykernel's, or a REP (which strips the envelope and puts it back); while
 * hb_silent, a ping is read and dropped. */
static void echo(void *hb) {
        zmq_msg_t frames[8];
        int n = recv_multipart(hb, frames, 8);

        for (int i = 0; i < n; i++) {
                if (!hb_silent)
                        zmq_msg_send(&frames[i], hb, i < n - 1 ? ZMQ_SNDMORE : 0);
                zmq_msg_close(&frames[i]);
        }
}

int main(int argc, char *argv[]) {
        int types[_CHANNEL_MAX] = {
                [CHANNEL_SHELL] = ZMQ_ROUTER,   [CHANNEL_IOPUB] = ZMQ_PUB, [CHANNEL_STDIN] = ZMQ_ROUTER,
                [CHANNEL_CONTROL] = ZMQ_ROUTER, [CHANNEL_HB] = ZMQ_ROUTER,
        };
        _cleanup_free_ char *text = NULL;
        ConnectionInfo ci;
        void *ctx, *socks[_CHANNEL_MAX];
        const char *file = NULL;
        int count = 0, done = 0;

        for (int i = 1; i < argc; i++) {
                if (streq(argv[i], "--exit") && i + 1 < argc)
                        return atoi(argv[++i]);
                if (streq(argv[i], "--ignore-shutdown"))
                        ignore_shutdown = true;
                else if (streq(argv[i], "--ignore-term"))
                        signal(SIGTERM, SIG_IGN);
                else if (streq(argv[i], "--rep-heartbeat"))
                        types[CHANNEL_HB] = ZMQ_REP;
                else if (streq(argv[i], "-f") && i + 1 < argc)
                        file = argv[++i];
                else {
                        fprintf(stderr, "usage: stubkernel [--exit CODE] [--ignore-shutdown] [--ignore-term] "
                                        "[--rep-heartbeat] -f CONNECTION_FILE\n");
                        return 2;
                }
        }
        if (!file) {
                fprintf(stderr, "stubkernel: -f CONNECTION_FILE is missing\n");
                return 2;
        }
        if (read_file(file, 64 * 1024, &text, NULL) < 0 || connection_info_parse(text, &ci) < 0) {
                fprintf(stderr, "stubkernel: cannot read %s\n", file);
                return 1;
        }
        key = ci.key;
        ctx = zmq_ctx_new();
        zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
        for (int ch = 0; ch < _CHANNEL_MAX; ch++) {
                char ep[sizeof ci.ip + 16];
                int linger = 0;
                socks[ch] = zmq_socket(ctx, types[ch]);
                zmq_setsockopt(socks[ch], ZMQ_LINGER, &linger, sizeof linger);
                if (connection_endpoint(&ci, ch, ep, sizeof ep) < 0 || zmq_bind(socks[ch], ep) < 0) {
                        fprintf(stderr, "stubkernel: cannot bind %s (%s): %s\n", ep, channel_to_string(ch),
                                zmq_strerror(errno));
                        return 1;
                }
        }
        stdin_sock = socks[CHANNEL_STDIN];
        signal(SIGINT, SIG_IGN); /* an interrupt with nothing running, as ipykernel when idle */
        struct sigaction sa = { .sa_handler = on_hb_signal };
        sigaction(SIGUSR1, &sa, NULL);
        sigaction(SIGUSR2, &sa, NULL);
        while (!done) {
                /* While "hang" runs, shell waits as a real kernel's does: only control and hb are answered. */
                zmq_pollitem_t items[] = {
                        { socks[CHANNEL_SHELL], 0, hang.running ? 0 : ZMQ_POLLIN, 0 },
                        { socks[CHANNEL_CONTROL], 0, ZMQ_POLLIN, 0 },
                        { socks[CHANNEL_HB], 0, ZMQ_POLLIN, 0 },
                };
                if (zmq_poll(items, 3, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (items[0].revents & ZMQ_POLLIN)
                        done |= handle(socks[CHANNEL_SHELL], socks[CHANNEL_IOPUB], &count);
                if (items[1].revents & ZMQ_POLLIN)
                        done |= handle(socks[CHANNEL_CONTROL], socks[CHANNEL_IOPUB], &count);
                if (items[2].revents & ZMQ_POLLIN)
                        echo(socks[CHANNEL_HB]);
        }
        for (int ch = 0; ch < _CHANNEL_MAX; ch++)
                zmq_close(socks[ch]);
        zmq_ctx_term(ctx);
        return 0;
}

/* Tests of a KernelConn against a real ipykernel. */
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

#include "jupyter.h"
#include "util.h"
#include "ports.h"
#include "tap.h"
#include "jupyter-world.h"

/* A TAP test point skipped with a reason (tap.h only skips whole programs). */
static void skip(const char *reason) {
        printf("ok %d # SKIP %s\n", ++tap_n, reason);
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

/* Waits (bounded) for the kernel to exit on its own; its status or -ETIMEDOUT. The loop runs meanwhile, as the
 * daemon's always does: our side of the connections reads what the kernel sends as it closes them. */
static int wait_kernel_exit(uv_loop_t *loop, int *ret_status) {
        for (unsigned i = 0; i < SAFETY_TIMEOUT_MS / 10; i++) {
                (void) uv_run(loop, UV_RUN_NOWAIT);
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
        r = kernel_conn_new(&loop, &ci, 0, &callbacks, &s, &c);
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

        r = wait_kernel_exit(&loop, &status);
        if (!is_int(r, 0, "live: the kernel exited"))
                diag_kernel_log(); /* where it hung */
        if (r == 0 &&
            !ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "live: cleanly (status 0x%x)", (unsigned) status))
                diag_kernel_log(); /* the kernel's own words on how it ended (an abort names libzmq's assertion) */
        is_int(kernel_conn_dropped(c), 0, "live: nothing dropped");
        is_int(s.reentered, 0, "live: no callback inside a call");

out:
        kernel_conn_close(c);
        json_decref(s.reply_content);
        uv_close((uv_handle_t *) &s.safety, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&loop), 0, "live: uv_loop_close, nothing left on the loop");
}

int main(void) {
        atexit(cleanup);

        test_conn_live();

        cleanup();
        return tap_done();
}

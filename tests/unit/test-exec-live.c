/* Tests of the cell queue on real ipykernels through a real KernelConn
 * (outputs, errors, timeouts, cancel, input(), the output limit,
 * matplotlib, a kernel killed mid-cell, give_up and free). */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chunking.h"
#include "exec.h"
#include "jupyter.h"
#include "util.h"
#include "ports.h"
#include "tap.h"
#include "exec-world.h"

#define MAX_KERNELS 4

static void skip(const char *reason) {
        printf("ok %d # SKIP %s\n", ++tap_n, reason);
}

/* ---- Real kernels ---- */

static char tmpdir[] = "/tmp/test-exec.XXXXXX";
static bool have_tmpdir;
static pid_t kernel_pids[MAX_KERNELS];
static unsigned n_kernels;

static void cleanup(void) {
        for (unsigned i = 0; i < n_kernels; i++)
                if (kernel_pids[i] > 0) {
                        (void) kill(-kernel_pids[i], SIGKILL);
                        (void) waitpid(kernel_pids[i], NULL, 0);
                        kernel_pids[i] = 0;
                }
        if (have_tmpdir) {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
                if (system(cmd) != 0)
                        fprintf(stderr, "# could not remove %s\n", tmpdir);
                have_tmpdir = false;
        }
}

static int write_connection_file(const char *path, const ConnectionInfo *ci) {
        /* The daemon's own writer: the same JSON a kernel gets from kernelsupd. */
        return connection_file_write(path, ci, (uid_t) -1, (gid_t) -1);
}

static void diag_kernel_log(unsigned k) {
        _cleanup_free_ char *text = NULL;
        char path[160];

        snprintf(path, sizeof path, "%s/kernel%u.log", tmpdir, k);
        if (read_file(path, 16384, &text, NULL) < 0)
                return;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
                printf("# kernel%u: %s\n", k, line);
}

/* Launches kernel number k in its own session and connects w.conn to it;
 * waits for its kernel_info_reply. */
static int kernel_launch(unsigned k) {
        ConnectionInfo ci = { .ip = "127.0.0.1" };
        uint8_t key[KEY_BYTES];
        char conn_path[160], log_path[160];
        _cleanup_close_ int log_fd = -1, null_fd = -1;
        pid_t pid;
        int r;

        snprintf(conn_path, sizeof conn_path, "%s/kernel%u.json", tmpdir, k);
        snprintf(log_path, sizeof log_path, "%s/kernel%u.log", tmpdir, k);
        if (random_bytes(key, sizeof key) < 0 || pick_ports(ci.ports) < 0)
                return -EIO;
        hex_encode(key, sizeof key, ci.key);
        r = write_connection_file(conn_path, &ci);
        if (r < 0)
                return r;
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (log_fd < 0 || null_fd < 0)
                return -errno;

        /* Before the first fork only: libzmq threads exist later, and the
         * child makes only async-signal-safe calls. */
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                char *argv[] = { (char *) "/usr/bin/python3",
                                 (char *) "-m",
                                 (char *) "ipykernel_launcher",
                                 (char *) "-f",
                                 conn_path,
                                 (char *) "--HistoryManager.hist_file=:memory:",
                                 NULL };

                (void) setsid();
                if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        kernel_pids[n_kernels++] = pid;
        w.pid = pid;

        r = kernel_conn_new(&w.loop, &ci, exec_message_bound(10 * 1024 * 1024), &conn_callbacks, &w, &w.conn);
        if (r < 0)
                return r;
        w.info_replied = false;
        r = kernel_conn_send(w.conn, CHANNEL_SHELL, "kernel_info_request", NULL, w.info_id);
        if (r < 0)
                return r;
        if (!RUN_UNTIL(w.info_replied)) {
                diag_kernel_log(k);
                return -ETIMEDOUT;
        }
        return 0;
}

/* SIGKILLs the current kernel's group and reaps it. */
static void kernel_kill(void) {
        if (w.pid <= 0)
                return;
        (void) kill(-w.pid, SIGKILL);
        (void) waitpid(w.pid, NULL, 0);
        for (unsigned i = 0; i < n_kernels; i++)
                if (kernel_pids[i] == w.pid)
                        kernel_pids[i] = 0;
        w.pid = 0;
        kernel_conn_close(w.conn);
        w.conn = NULL;
}

static void test_basics(Done *d) {
        long long c1;
        unsigned bt = w.busy_true, bf = w.busy_false;

        if (!ok(run_cell("x = 41", d), "x = 41 runs"))
                return;
        is_int(d->status, EXEC_OK, "x = 41: ok");
        is_int(json_array_size(d->outputs), 0, "x = 41: no outputs");
        is_str(d->kernel_id, "k1", "x = 41: kernel_id of the attached kernel");
        ok(d->message == NULL, "x = 41: no message");
        ok(d->count > 0, "x = 41: an execution_count (%lld)", d->count);
        c1 = d->count;
        is_int(exec_queue_execution_count(w.q), c1, "the queue reports the last execution_count");
        is_int(w.busy_true - bt, 1, "busy(true) once");
        is_int(w.busy_false - bf, 1, "busy(false) once");
        ok(!w.busy && !exec_queue_busy(w.q), "not busy after the cell");

        ok(run_cell("x + 1", d), "x + 1 runs");
        is_int(d->status, EXEC_OK, "x + 1: ok");
        is_int(d->count, c1 + 1, "execution_count increments");
        is_int(json_array_size(d->outputs), 1, "x + 1: one output");
        {
                const json_t *o = json_array_get(d->outputs, 0);
                is_str(out_type(o), "execute_result", "x + 1: an execute_result");
                is_str(plain(o), "42", "x + 1: text/plain 42");
                is_int(json_integer_value(json_object_get(o, "execution_count")), c1 + 1,
                       "x + 1: execute_result carries execution_count");
                ok(json_is_object(json_object_get(o, "metadata")), "x + 1: metadata is an object");
                is_int(json_object_size(o), 4, "x + 1: only nbformat keys");
        }
        is_int(json_array_size(d->streamed), 1, "x + 1: streamed once");
        ok(json_equal(json_array_get(d->streamed, 0), json_array_get(d->outputs, 0)),
           "x + 1: the streamed output equals the collected one");
}

static void test_streams(Done *d) {
        _cleanup_free_ char *out = NULL, *err = NULL, *streamed = NULL;

        ok(run_cell("import sys, time\n"
                    "for i in range(3):\n"
                    "    print(i); sys.stdout.flush(); time.sleep(0.05)\n",
                    d),
           "prints run");
        is_int(d->status, EXEC_OK, "prints: ok");
        is_int(json_array_size(d->outputs), 1, "prints: chunks merged into one output");
        is_str(out_type(json_array_get(d->outputs, 0)), "stream", "prints: a stream");
        is_str(json_string_value(json_object_get(json_array_get(d->outputs, 0), "name")), "stdout",
               "prints: on stdout");
        out = stream_text(d->outputs, "stdout");
        is_str(out, "0\n1\n2\n", "prints: the text");
        streamed = stream_text(d->streamed, "stdout");
        is_str(streamed, "0\n1\n2\n", "prints: the streamed chunks add up to the same text");
        ok(json_array_size(d->streamed) >= 2, "prints: streamed as chunks (%zu)", json_array_size(d->streamed));

        ok(run_cell("import sys; sys.stderr.write('oops\\n'); sys.stderr.flush()", d), "stderr write runs");
        err = stream_text(d->outputs, "stderr");
        is_str(err, "oops\n", "stderr: on the stderr stream");
}

static void test_errors(Done *d) {
        Done d2 = { 0 };
        const json_t *e;

        ok(run_cell("1/0", d), "1/0 runs");
        is_int(d->status, EXEC_ERROR, "1/0: EXEC_ERROR");
        e = find_output(d->outputs, "error");
        ok(e != NULL, "1/0: an error output");
        is_str(json_string_value(json_object_get(e, "ename")), "ZeroDivisionError", "1/0: ename");
        ok(json_string_value(json_object_get(e, "evalue")) != NULL, "1/0: evalue");
        ok(json_array_size(json_object_get(e, "traceback")) > 0, "1/0: a traceback");
        ok(d->count > 0, "1/0: an execution_count");
        ok(d->message == NULL, "1/0: no message");
        ok(run_cell("x", d), "x after the error");
        is_str(plain(find_output(d->outputs, "execute_result")), "41", "the error kept the namespace");

        /* The second cell reaches the kernel right after the first one's error
         * reply: the kernel's abort window must not swallow it. */
        done_reset(d);
        done_reset(&d2);
        is_int(exec_queue_submit(w.q, "1/0", &default_opt, &sink, d, NULL), 0, "back to back: submit 1/0");
        is_int(exec_queue_submit(w.q, "x * 2", &default_opt, &sink, &d2, NULL), 0, "back to back: submit x * 2");
        ok(RUN_UNTIL(d->done && d2.done), "back to back: both answered");
        is_int(d->status, EXEC_ERROR, "back to back: first errors");
        is_int(d2.status, EXEC_OK, "back to back: the next one still runs");
        is_str(plain(find_output(d2.outputs, "execute_result")), "82", "back to back: its result");

        ok(run_cell("input('name? ')", d), "input() runs");
        is_int(d->status, EXEC_ERROR, "input(): an error, not a hang");
        is_str(json_string_value(json_object_get(find_output(d->outputs, "error"), "ename")),
               "StdinNotImplementedError", "input(): StdinNotImplementedError");
        done_reset(&d2);
        json_decref(d2.streamed);
}

static void test_timeout(Done *d) {
        ExecOptions opt = default_opt;
        unsigned before = w.interrupts;
        const json_t *e;

        opt.timeout = 1 * USEC_PER_SEC;
        ok(run_cell_opt("print('spinning', flush=True)\nwhile True: pass", &opt, d), "while True with timeout 1 s");
        is_int(d->status, EXEC_TIMEOUT, "timeout: EXEC_TIMEOUT");
        is_int(w.interrupts - before, 1, "timeout: one interrupt");
        ok(d->message && strstr(d->message, "timeout"), "timeout: a message (%s)", d->message ?: "(null)");
        is_str(stext(d->outputs, "stdout"), "spinning\n", "timeout: outputs so far are kept");
        e = find_output(d->outputs, "error");
        is_str(json_string_value(json_object_get(e, "ename")), "KeyboardInterrupt",
               "timeout: the KeyboardInterrupt error output");
        is_str(d->kernel_id, "k1", "timeout: kernel_id");
        ok(run_cell("x", d), "a cell after the timeout");
        is_int(d->status, EXEC_OK, "after the timeout: ok");
        is_str(plain(find_output(d->outputs, "execute_result")), "41", "after the timeout: x is still there");

        /* A timeout that is not reached changes nothing. */
        opt.timeout = 30 * USEC_PER_SEC;
        before = w.interrupts;
        ok(run_cell_opt("x", &opt, d), "a quick cell with a timeout");
        is_int(d->status, EXEC_OK, "quick cell with a timeout: ok");
        is_int(w.interrupts, before, "quick cell: no interrupt");
}

static void test_order(Done *d) {
        Done d2 = { 0 };
        unsigned bt = w.busy_true, bf = w.busy_false;

        done_reset(d);
        done_reset(&d2);
        is_int(exec_queue_submit(w.q, "import time; time.sleep(0.3); order = [1]", &default_opt, &sink, d, NULL), 0,
               "order: submit the first");
        is_int(exec_queue_submit(w.q, "order.append(2); order", &default_opt, &sink, &d2, NULL), 0,
               "order: submit the second at once");
        ok(exec_queue_busy(w.q), "order: the first runs");
        is_int(exec_queue_pending(w.q), 1, "order: the second waits");
        ok(RUN_UNTIL(d->done && d2.done), "order: both answered");
        ok(d->order < d2.order, "order: in arrival order");
        is_int(d2.status, EXEC_OK, "order: second ok");
        is_str(plain(find_output(d2.outputs, "execute_result")), "[1, 2]", "order: the second ran after the first");
        is_int(w.busy_true - bt, 1, "order: busy(true) once for both");
        is_int(w.busy_false - bf, 1, "order: busy(false) once, when the queue drained");
        done_reset(&d2);
        json_decref(d2.streamed);
}

static void test_cancel(Done *d) {
        Done dc = { 0 }, dq = { 0 };
        ExecCell *cell = NULL, *queued = NULL;
        unsigned before = w.interrupts;

        done_reset(&dc);
        done_reset(&dq);
        is_int(exec_queue_submit(w.q, "print('started', flush=True)\nwhile True: pass", &default_opt, &sink, &dc,
                                 &cell),
               0, "cancel: submit a spinning cell");
        is_int(exec_queue_submit(w.q, "never_defined = 1", &default_opt, &sink, &dq, &queued), 0,
               "cancel: submit a cell behind it");
        ok(RUN_UNTIL(json_array_size(dc.streamed) > 0), "cancel: the spinning cell started");
        exec_cell_cancel(queued);
        is_int(exec_queue_pending(w.q), 0, "cancel: the queued cell is gone");
        is_int(w.interrupts, before, "cancel of a queued cell: no interrupt");
        exec_cell_cancel(cell);
        is_int(w.interrupts - before, 1, "cancel of the running cell interrupts it");
        ok(exec_queue_busy(w.q), "cancel: the kernel is still busy until it answers");

        ok(run_cell("x", d), "cancel: the next cell runs");
        is_int(d->status, EXEC_OK, "cancel: next ok");
        is_str(plain(find_output(d->outputs, "execute_result")), "41", "cancel: next sees x");
        ok(!dc.done && !dq.done, "cancel: no answer for the cancelled cells");
        ok(run_cell("'never_defined' in dir()", d), "cancel: check the queued cell did not run");
        is_str(plain(find_output(d->outputs, "execute_result")), "False", "cancel: the queued cell never ran");
        is_int(w.interrupts - before, 1, "cancel: only one interrupt");

        /* exec_queue_interrupt from anywhere. */
        ok(!exec_queue_interrupt(w.q), "interrupt: nothing running: false");
        done_reset(&dc);
        is_int(exec_queue_submit(w.q, "print('started', flush=True)\nwhile True: pass", &default_opt, &sink, &dc,
                                 NULL),
               0, "interrupt: submit a spinning cell");
        ok(RUN_UNTIL(json_array_size(dc.streamed) > 0), "interrupt: it started");
        ok(exec_queue_interrupt(w.q), "interrupt: true while running");
        ok(RUN_UNTIL(dc.done), "interrupt: answered");
        is_int(dc.status, EXEC_ERROR, "interrupt: EXEC_ERROR (the cell raised)");
        is_str(json_string_value(json_object_get(find_output(dc.outputs, "error"), "ename")), "KeyboardInterrupt",
               "interrupt: KeyboardInterrupt");
        done_reset(&dc);
        done_reset(&dq);
        json_decref(dc.streamed);
        json_decref(dq.streamed);
}

static void test_display(Done *d) {
        _cleanup_free_ char *out = NULL;
        const json_t *o, *s;

        ok(run_cell("from IPython.display import display, clear_output\n"
                    "print('a', flush=True); clear_output(); print('b')",
                    d),
           "clear_output runs");
        out = stream_text(d->outputs, "stdout");
        is_str(out, "b\n", "clear_output: what came before is gone");
        ok(find_output(d->streamed, "clear_output") != NULL, "clear_output: streamed");

        free(out);
        ok(run_cell("print('a', flush=True); clear_output(wait=True); print('b')", d), "clear_output(wait) runs");
        out = stream_text(d->outputs, "stdout");
        is_str(out, "b\n", "clear_output(wait=True): cleared at the next output");

        ok(run_cell("h = display('one', display_id=True); h.update('two')", d), "update_display runs");
        is_int(count_outputs(d->outputs, "display_data"), 1, "update_display: one display");
        o = find_output(d->outputs, "display_data");
        is_str(plain(o), "'two'", "update_display: replaced in place");
        ok(json_object_get(o, "transient") == NULL, "update_display: no transient in collected outputs");
        s = find_output(d->streamed, "update_display_data");
        is_str(plain(s), "'two'", "update_display: streamed");
        ok(json_string_value(json_object_get(json_object_get(s, "transient"), "display_id")) != NULL,
           "update_display: the streamed update names its display_id");
        s = find_output(d->streamed, "display_data");
        ok(json_string_value(json_object_get(json_object_get(s, "transient"), "display_id")) != NULL,
           "update_display: the streamed display names its display_id");
}

static void test_limit(Done *d) {
        ExecOptions opt = default_opt;
        size_t i, kept = 0, streamed = 0, markers = 0;
        const json_t *o;
        char marker[128];

        opt.output_limit = 64 * 1024;
        snprintf(marker, sizeof marker, "\n[output truncated: limit of %zu bytes reached]\n", opt.output_limit);
        {
                /* The output chunking patch, run here as a cell of its own (the context runs it as a user
                 * expression): with it the kernel counts what each cell writes, and the cut is exact. */
                json_auto_t *req = chunking_request(CHUNKING_CHARS);
                const char *patch = json_string_value(
                        json_object_get(json_object_get(req, "user_expressions"), CHUNKING_EXPRESSION));

                ok(patch && run_cell(patch, d), "the output chunking patch runs");
                is_str(plain(find_output(d->outputs, "execute_result")), "'on'", "the patch is on");
                exec_queue_count_written(w.q, true);
        }
        ok(run_cell_opt("print('x' * 5_000_000)\nprint('after')\nz = 7", &opt, d), "huge print runs");
        is_int(d->status, EXEC_OK, "huge print: ok");
        json_array_foreach(d->outputs, i, o) {
                const char *t = json_string_value(json_object_get(o, "text"));
                if (t)
                        kept += strlen(t);
        }
        json_array_foreach(d->streamed, i, o) {
                const char *t = json_string_value(json_object_get(o, "text"));
                if (t) {
                        streamed += strlen(t);
                        markers += streq(t, marker);
                }
        }
        {
                const char *err = stext(d->outputs, "stderr"), *m = strstr(err, marker);
                ok(m && !strstr(m + 1, marker), "huge print: the marker is there, once");
        }
        {
                /* 5,000,001 + 6 bytes printed, 65536 kept. */
                const char *summary = "[output truncated: 4934471 more bytes not kept]\n";
                const char *err = stext(d->outputs, "stderr");

                ok(strlen(err) >= strlen(summary) && streq(err + strlen(err) - strlen(summary), summary),
                   "huge print: the last output says exactly how much was cut (the kernel's count)");
                kept -= strlen(summary);
                streamed -= strlen(summary);
        }
        exec_queue_count_written(w.q, false);
        ok(run_cell_opt("print('x' * 100_000)", &opt, d), "huge print, no count asked");
        ok(strstr(stext(d->outputs, "stderr"), "[output truncated: at least 34465 more bytes not kept]\n") != NULL,
           "huge print, no count asked: at least what came past the limit");
        ok(kept <= opt.output_limit + strlen(marker), "huge print: kept text bounded (%zu)", kept);
        ok(kept >= opt.output_limit, "huge print: kept up to the limit (%zu)", kept);
        ok(streamed <= opt.output_limit + strlen(marker), "huge print: streamed text bounded (%zu)", streamed);
        is_int(markers, 1, "huge print: the marker streamed once");
        ok(d->count > 0, "huge print: execution_count still reported");
        ok(run_cell("z", d), "after the huge print");
        is_str(plain(find_output(d->outputs, "execute_result")), "7", "the cell ran to its end");

        /* A display bigger than what is left is dropped whole. */
        opt.output_limit = 1024;
        ok(run_cell_opt("from IPython.display import display\nprint('small')\n"
                        "display({'text/plain': 'z' * 5000}, raw=True)\ndisplay({'text/plain': 'w'}, raw=True)",
                        &opt, d),
           "big display runs");
        is_int(count_outputs(d->outputs, "display_data"), 0, "big display: dropped, and nothing after it");
        is_str(stext(d->outputs, "stdout"), "small\n", "big display: what came before is kept");
        ok(strstr(stext(d->outputs, "stderr"), "[output truncated: limit of 1024 bytes reached]") != NULL,
           "big display: the marker");
        is_int(count_outputs(d->streamed, "display_data"), 0, "big display: not streamed either");

        /* An error after the limit is still kept: it is the cell's outcome. */
        opt.output_limit = 1000;
        ok(run_cell_opt("print('y' * 5000)\n1/0", &opt, d), "huge print then error");
        is_int(d->status, EXEC_ERROR, "huge print then error: EXEC_ERROR");
        is_str(json_string_value(json_object_get(find_output(d->outputs, "error"), "ename")), "ZeroDivisionError",
               "huge print then error: the error output is kept");
}

static void test_matplotlib(Done *d) {
        const json_t *o;
        const char *png;

        if (system("/usr/bin/python3 -c 'import matplotlib, matplotlib_inline' >/dev/null 2>&1") != 0) {
                skip("matplotlib: /usr/bin/python3 has no matplotlib");
                return;
        }
        ok(run_cell("import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()", d), "matplotlib runs");
        is_int(d->status, EXEC_OK, "matplotlib: ok");
        o = find_output(d->outputs, "display_data");
        png = json_string_value(json_object_get(json_object_get(o, "data"), "image/png"));
        ok(png && strlen(png) > 100, "matplotlib: a display_data with image/png");
        ok(plain(o) != NULL, "matplotlib: and text/plain");
        ok(json_is_object(json_object_get(o, "metadata")), "matplotlib: metadata");
}

/* A cell that ignores SIGINT: answered EXEC_TIMEOUT after the grace period;
 * the queue waits for the kernel. Then the kernel is killed: the next cell
 * runs on the next kernel. Then a kernel killed mid-cell. */
static void test_abandon_and_death(Done *d) {
        ExecOptions opt = default_opt;
        Done dq = { 0 }, dn = { 0 };
        unsigned before = w.interrupts;
        int r;

        opt.timeout = 1 * USEC_PER_SEC;
        ok(run_cell_opt("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                        "print('deaf', flush=True)\nwhile True: time.sleep(0.01)",
                        &opt, d),
           "a deaf cell with timeout 1 s is answered");
        is_int(d->status, EXEC_TIMEOUT, "deaf: EXEC_TIMEOUT");
        ok(d->message && strstr(d->message, "did not stop"), "deaf: the message says so (%s)", d->message ?: "(null)");
        is_str(stext(d->outputs, "stdout"), "deaf\n", "deaf: outputs so far");
        is_int(w.interrupts - before, 1, "deaf: one interrupt");
        ok(exec_queue_busy(w.q), "deaf: the kernel is still busy with it");

        done_reset(&dq);
        is_int(exec_queue_submit(w.q, "y = 5; y", &default_opt, &sink, &dq, NULL), 0, "deaf: submit behind it");
        run_for(300);
        ok(!dq.done, "deaf: the next cell waits (never two cells at once)");
        is_int(exec_queue_pending(w.q), 1, "deaf: it is queued");

        kernel_kill();
        exec_queue_detach(w.q, "killed by SIGKILL");
        ok(!exec_queue_busy(w.q), "detach: nothing runs");
        ok(!dq.done, "detach: the queued cell waits for the next kernel");
        r = kernel_launch(2);
        if (!ok(r == 0, "second kernel ready (%s)", strerror(-r)))
                goto out;
        exec_queue_attach(w.q, w.conn, "k2");
        ok(RUN_UNTIL(dq.done), "attach: the queued cell runs");
        is_int(dq.status, EXEC_OK, "attach: ok");
        is_str(dq.kernel_id, "k2", "attach: on the new kernel");
        is_str(plain(find_output(dq.outputs, "execute_result")), "5", "attach: its result");

        /* Killed mid-cell. */
        done_reset(&dq);
        done_reset(&dn);
        is_int(exec_queue_submit(w.q, "print('s', flush=True)\nwhile True: pass", &default_opt, &sink, &dq, NULL), 0,
               "death: submit a spinning cell");
        is_int(exec_queue_submit(w.q, "x", &default_opt, &sink, &dn, NULL), 0, "death: and one behind it");
        ok(RUN_UNTIL(json_array_size(dq.streamed) > 0), "death: it started");
        kernel_kill();
        exec_queue_detach(w.q, "killed by SIGKILL");
        run_for(100);
        ok(!dq.done, "death: not answered before a new kernel");
        r = kernel_launch(3);
        if (!ok(r == 0, "third kernel ready (%s)", strerror(-r)))
                goto out;
        exec_queue_attach(w.q, w.conn, "k3");
        ok(dq.done, "death: answered at attach");
        is_int(dq.status, EXEC_DIED, "death: EXEC_DIED");
        is_str(dq.kernel_id, "k3", "death: names the new kernel");
        ok(dq.message && strstr(dq.message, "killed by SIGKILL") && strstr(dq.message, "k3"),
           "death: the message says why and names the new kernel (%s)", dq.message ?: "(null)");
        is_str(stext(dq.outputs, "stdout"), "s\n", "death: outputs so far");
        ok(RUN_UNTIL(dn.done), "death: the queued cell runs on the new kernel");
        is_int(dn.status, EXEC_ERROR, "death: ... in a new namespace");
        is_str(json_string_value(json_object_get(find_output(dn.outputs, "error"), "ename")), "NameError",
               "death: x is gone (NameError)");
        is_str(dn.kernel_id, "k3", "death: kernel_id k3");

        /* An attach without a detach: the kernel was replaced under the running cell. */
        done_reset(&dq);
        done_reset(&dn);
        is_int(exec_queue_submit(w.q, "print('s', flush=True)\nwhile True: pass", &default_opt, &sink, &dq, NULL), 0,
               "replaced: submit a spinning cell");
        ok(RUN_UNTIL(json_array_size(dq.streamed) > 0), "replaced: it started");
        exec_queue_attach(w.q, w.conn, "k3b");
        ok(dq.done, "replaced: the running cell is answered at once");
        is_int(dq.status, EXEC_DIED, "replaced: EXEC_DIED");
        is_str(dq.kernel_id, "k3b", "replaced: names the new kernel_id");
        ok(dq.message && strstr(dq.message, "replaced"), "replaced: says so (%s)", dq.message ?: "(null)");
        /* The same process still spins the old cell: stop it by hand; its
         * messages belong to no cell any more. */
        (void) kill(-w.pid, SIGINT);
        ok(run_cell("'after'", &dn), "replaced: a cell runs afterwards");
        is_str(plain(find_output(dn.outputs, "execute_result")), "'after'", "replaced: its own result only");
        is_int(json_array_size(dn.outputs), 1, "replaced: nothing of the old cell leaks into it");
        is_str(dn.kernel_id, "k3b", "replaced: kernel_id k3b");

        /* give_up under a running cell and a queued one. */
        done_reset(&dq);
        done_reset(&dn);
        is_int(exec_queue_submit(w.q, "print('s', flush=True)\nwhile True: pass", &default_opt, &sink, &dq, NULL), 0,
               "give_up: submit a spinning cell");
        is_int(exec_queue_submit(w.q, "1", &default_opt, &sink, &dn, NULL), 0, "give_up: and one behind it");
        ok(RUN_UNTIL(json_array_size(dq.streamed) > 0), "give_up: it started");
        exec_queue_give_up(w.q, "the context was stopped");
        ok(dq.done && dn.done, "give_up: both answered at once");
        is_int(dq.status, EXEC_DIED, "give_up: the running cell died");
        ok(dq.kernel_id == NULL, "give_up: no new kernel");
        ok(dq.message && strstr(dq.message, "the context was stopped"), "give_up: message (%s)",
           dq.message ?: "(null)");
        is_int(dn.status, EXEC_ABORTED, "give_up: the queued cell aborted");
        kernel_kill();

out:
        done_reset(&dq);
        done_reset(&dn);
        json_decref(dq.streamed);
        json_decref(dn.streamed);
}

static void test_live(void) {
        Done d = { 0 };
        int r;

        if (system("/usr/bin/python3 -c 'import ipykernel' >/dev/null 2>&1") != 0) {
                skip("live: /usr/bin/python3 cannot import ipykernel");
                return;
        }
        if (!mkdtemp(tmpdir)) {
                ok(false, "live: mkdtemp: %s", strerror(errno));
                return;
        }
        have_tmpdir = true;
        /* ipykernel 6.17 exits when orphaned if this is set (doc/design.md, section 4), and
         * matplotlib must use ipykernel's inline backend, whatever ours is. */
        unsetenv("JPY_PARENT_PID");
        setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline", 1);

        ok(uv_loop_init(&w.loop) == 0, "live: loop");
        uv_timer_init(&w.loop, &w.safety);
        is_int(exec_queue_new(&w.loop, &hooks, &w, &w.q), 0, "live: queue");
        done_reset(&d);

        r = kernel_launch(1);
        if (!ok(r == 0, "live: kernel ready (%s)", strerror(-r)))
                goto out;
        /* Submitted before attach: it waits, then runs first. */
        is_int(exec_queue_submit(w.q, "early = 'yes'", &default_opt, &sink, &d, NULL), 0, "live: early submit");
        exec_queue_attach(w.q, w.conn, "k1");
        ok(RUN_UNTIL(d.done), "live: the early cell runs after attach");
        is_int(d.status, EXEC_OK, "live: early cell ok");

        test_basics(&d);
        test_streams(&d);
        test_errors(&d);
        test_timeout(&d);
        test_order(&d);
        test_cancel(&d);
        test_display(&d);
        test_limit(&d);
        test_matplotlib(&d);
        test_abandon_and_death(&d);

out:
        kernel_kill();
        exec_queue_free(w.q);
        w.q = NULL;
        done_reset(&d);
        json_decref(d.streamed);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "live: uv_loop_close, nothing left on the loop");
}

int main(void) {
        atexit(cleanup);
        test_live();
        cleanup();
        (void) stext(NULL, NULL);
        return tap_done();
}

/* Tests of the cell queue: its contract without a kernel, and its states
 * (handshake, lost idles, probes, interrupts, drops, deadlines) driven by
 * hand-built messages through a fake send hook; the kernel's count of what
 * a cell wrote against what came. Other clients of the
 * kernel: test-exec-clients.c; real ipykernels: test-exec-live.c. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-world.h"

/* ---- Without a kernel ---- */

static void test_no_kernel(void) {
        ExecQueue *q = NULL;
        ExecCell *a = NULL, *b = NULL;
        Done da = { 0 }, db = { 0 };
        uv_loop_t loop;

        is_str(exec_status_to_string(EXEC_OK), "ok", "status name ok");
        is_str(exec_status_to_string(EXEC_ERROR), "error", "status name error");
        is_str(exec_status_to_string(EXEC_TIMEOUT), "timeout", "status name timeout");
        is_str(exec_status_to_string(EXEC_DIED), "died", "status name died");
        is_str(exec_status_to_string(EXEC_ABORTED), "aborted", "status name aborted");
        ok(exec_status_to_string(_EXEC_STATUS_MAX) == NULL, "status name out of range: NULL");

        uv_loop_init(&loop);
        is_int(exec_queue_new(NULL, &hooks, &w, &q), -EINVAL, "new: no loop: -EINVAL");
        is_int(exec_queue_new(&loop, &hooks, &w, &q), 0, "new");
        is_int(exec_queue_execution_count(q), -1, "no execution_count yet");
        is_int(exec_queue_last_activity(q), 0, "no activity yet");
        ok(!exec_queue_busy(q), "not busy");
        ok(!exec_queue_interrupt(q), "interrupt with nothing running: false");

        done_reset(&da);
        done_reset(&db);
        is_int(exec_queue_submit(q, NULL, &default_opt, &sink, &da, &a), -EINVAL, "submit: no code: -EINVAL");
        is_int(exec_queue_submit(q, "1", &default_opt, &(ExecSink){ sink_output, NULL }, &da, &a), -EINVAL,
               "submit: no on_done: -EINVAL");
        is_int(exec_queue_submit(q, "1", NULL, &sink, &da, &a), -EINVAL, "submit: no options: -EINVAL");

        /* Detached: cells wait. */
        is_int(exec_queue_submit(q, "1", &default_opt, &sink, &da, &a), 0, "submit while detached");
        is_int(exec_queue_submit(q, "2", &default_opt, &sink, &db, &b), 0, "submit a second");
        is_int(exec_queue_pending(q), 2, "both wait");
        ok(!exec_queue_busy(q), "nothing runs without a kernel");
        ok(exec_queue_last_activity(q) > 0, "submit counts as activity");
        exec_cell_cancel(a);
        is_int(exec_queue_pending(q), 1, "cancel of a queued cell drops it");
        is_int(w.interrupts, 0, "cancel of a queued cell interrupts nothing");
        exec_queue_detach(q, "nothing"); /* not attached: no effect */
        is_int(exec_queue_pending(q), 1, "detach while detached changes nothing");

        exec_queue_give_up(q, "the context was stopped");
        ok(db.done, "give_up answers the queued cell");
        is_int(db.status, EXEC_ABORTED, "as aborted");
        ok(db.kernel_id == NULL, "with no kernel_id");
        ok(db.message && strstr(db.message, "the context was stopped"), "the message says why: %s",
           db.message ?: "(null)");
        is_int(json_array_size(db.outputs), 0, "no outputs");
        ok(!da.done, "the cancelled cell was never answered");
        is_int(exec_queue_pending(q), 0, "nothing waits after give_up");

        done_reset(&db);
        is_int(exec_queue_submit(q, "3", &default_opt, &sink, &db, &b), 0, "the queue takes cells after give_up");
        exec_queue_free(q);
        ok(db.done && db.status == EXEC_ABORTED, "free answers waiting cells as aborted");
        ok(db.message && *db.message, "with a message");
        is_int(w.busy_true + w.busy_false, 0, "busy never reported without a running cell");
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&loop), 0, "no-kernel: uv_loop_close");
        done_reset(&da);
        done_reset(&db);
        json_decref(da.streamed);
        json_decref(db.streamed);
}

/* A backlog on iopub: a stream message, alternately an earlier cell's and the running one's, once per settle
 * period, just before it ends. */
static struct {
        uv_timer_t timer;
        ExecQueue *q;
        const char *id;
        int n;
} backlog;

static void backlog_cb(uv_timer_t *t) {
        feed_stream(backlog.q, backlog.n % 2 ? backlog.id : "an-earlier-cell", "x");
        if (++backlog.n < 6)
                uv_timer_start(t, backlog_cb, EXEC_SETTLE_USEC / USEC_PER_MSEC - 1, 0);
}

static void test_states(void) {
        ExecOptions opt = default_opt;
        ExecQueue *q = NULL;
        Done d = { 0 }, e = { 0 };
        char id[37], hs[37];
        const char *probe;
        unsigned since, interrupts;

        ok(uv_loop_init(&w.loop) == 0, "states: loop");
        uv_timer_init(&w.loop, &w.safety);
        w.busy_true = w.busy_false = 0;
        w.pid = 0;
        is_int(exec_queue_new(&w.loop, &fake_hooks, &w, &q), 0, "states: queue with a send hook");

        /* Handshake: cells wait until iopub delivers. */
        since = n_sent;
        exec_queue_attach(q, (KernelConn *) &fake_token, "kf");
        ok(sent_since(since, "kernel_info_request") != NULL, "attach: a kernel_info_request goes out");
        memcpy(hs, sent_since(since, "kernel_info_request") ?: "", 37);
        done_reset(&d);
        is_int(exec_queue_submit(q, "a", &opt, &sink, &d, NULL), 0, "handshake: submit");
        ok(!sent_since(since, "execute_request"), "handshake: the cell waits for iopub");
        feed_status(q, hs, "busy");
        ok(sent_since(since, "execute_request") != NULL, "handshake: iopub heard, the cell goes out");
        memcpy(id, sent_since(since, "execute_request") ?: "", 37);
        is_int(w.busy_true, 1, "busy(true) when it starts");

        /* Reply and idle: ok. */
        feed_stream(q, id, "out\n");
        feed_reply(q, id, "ok");
        ok(!d.done, "reply alone does not end it at once");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "reply and idle: EXEC_OK");
        is_str(stext(d.outputs, "stdout"), "out\n", "its output");
        ok(!w.busy && w.busy_false == 1, "busy(false) after it");

        /* The idle is lost: after EXEC_SETTLE_USEC a kernel_info round trip ends it. */
        since = n_sent;
        ok(submit_started(q, "b", &opt, &d, id), "lost idle: started");
        feed_reply(q, id, "ok");
        ok(RUN_UNTIL(sent_since(since, "kernel_info_request") != NULL), "lost idle: a probe goes out");
        probe = sent_since(since, "kernel_info_request");
        feed_status(q, "someone-else", "idle");
        feed_info(q, probe);
        ok(!d.done, "lost idle: the probe's reply alone waits for its idle");
        feed_status(q, probe, "idle");
        ok(d.done && d.status == EXEC_OK, "lost idle: probe reply and idle end it, EXEC_OK");
        ok(!strstr(stext(d.outputs, "stderr"), NO_REPLY), "lost idle: the reply came, no marker");

        /* The probe's idle is lost too: its reply and EXEC_SETTLE_USEC end it. */
        since = n_sent;
        ok(submit_started(q, "c", &opt, &d, id), "lost idles: started");
        feed_reply(q, id, "ok");
        ok(RUN_UNTIL(sent_since(since, "kernel_info_request") != NULL), "lost idles: a probe goes out");
        feed_info(q, sent_since(since, "kernel_info_request"));
        ok(RUN_UNTIL(d.done), "lost idles: ended after the settle time");
        is_int(d.status, EXEC_OK, "lost idles: EXEC_OK");

        /* iopub behind shell (a flood read slower than it is written): the reply came, the idle is behind a
         * backlog that keeps arriving, its own and an earlier cell's. The settle wait restarts while iopub
         * moves, so no probe goes out and nothing of it is lost. A message comes just before each settle
         * period ends (a timer started at the same loop time, 1 ms shorter, runs first), whatever the load. */
        since = n_sent;
        ok(submit_started(q, "flood", &opt, &d, id), "backlog: started");
        feed_reply(q, id, "ok");
        backlog.q = q;
        backlog.id = id;
        backlog.n = 0;
        uv_timer_init(&w.loop, &backlog.timer);
        uv_timer_start(&backlog.timer, backlog_cb, EXEC_SETTLE_USEC / USEC_PER_MSEC - 1, 0);
        ok(RUN_UNTIL(backlog.n == 6), "backlog: 6 settle periods with arriving messages");
        ok(!d.done && !sent_since(since, "kernel_info_request"), "backlog: no probe went out, not ended");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "backlog: its idle ends it, EXEC_OK");
        is_str(stext(d.outputs, "stdout"), "xxx", "backlog: all its output kept");
        uv_close((uv_handle_t *) &backlog.timer, NULL);

        /* An interrupt at the timeout lands after the code: idle, but no reply. */
        opt.timeout = 200 * USEC_PER_MSEC;
        interrupts = w.interrupts;
        since = n_sent;
        ok(submit_started(q, "pass", &opt, &d, id), "late interrupt: started with a timeout");
        feed_input(q, id);
        ok(RUN_UNTIL(w.interrupts > interrupts), "late interrupt: interrupted at the timeout");
        probe = sent_since(since, "kernel_info_request");
        ok(probe != NULL, "late interrupt: a probe goes out with the interrupt");
        feed_status(q, id, "idle");
        ok(!d.done, "late interrupt: idle without a reply does not end it");
        feed_info(q, probe);
        feed_status(q, probe, "idle");
        ok(d.done, "late interrupt: the probe ends it");
        is_int(d.status, EXEC_TIMEOUT, "late interrupt: EXEC_TIMEOUT");
        ok(strstr(stext(d.outputs, "stderr"), NO_REPLY) != NULL, "late interrupt: said in the outputs");
        ok(d.message && strstr(d.message, "no reply"), "late interrupt: and in the message (%s)",
           d.message ?: "(null)");
        ok(!exec_queue_busy(q) && !w.busy, "late interrupt: not busy afterwards");
        opt.timeout = USEC_INFINITY;

        /* A manual interrupt that draws no reply: EXEC_ABORTED. */
        since = n_sent;
        ok(submit_started(q, "pass", &opt, &d, id), "manual: started");
        ok(exec_queue_interrupt(q), "manual: interrupted");
        probe = sent_since(since, "kernel_info_request");
        feed_status(q, id, "idle");
        feed_info(q, probe);
        feed_status(q, probe, "idle");
        ok(d.done && d.status == EXEC_ABORTED, "manual: EXEC_ABORTED without a reply");
        ok(strstr(stext(d.outputs, "stderr"), NO_REPLY) != NULL, "manual: said in the outputs");

        /* The probe could not be sent: it is sent again. */
        since = n_sent;
        ok(submit_started(q, "pass", &opt, &d, id), "probe retry: started");
        send_error = -EAGAIN;
        ok(exec_queue_interrupt(q), "probe retry: interrupted while sends fail");
        send_error = 0;
        ok(RUN_UNTIL(sent_since(since, "kernel_info_request") != NULL), "probe retry: the probe goes out later");
        feed_reply(q, id, "error");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_ERROR, "probe retry: a reply still decides (EXEC_ERROR)");

        /* A dropped connection: a marker once, a probe, and the cell ends normally. */
        since = n_sent;
        ok(submit_started(q, "pass", &opt, &d, id), "dropped: started");
        exec_queue_on_dropped(q, CHANNEL_HB, 12345);
        exec_queue_on_dropped(q, CHANNEL_CONTROL, 12345);
        ok(!sent_since(since + 1, "kernel_info_request") && json_array_size(d.streamed) == 0,
           "dropped hb and control: nothing");
        exec_queue_on_dropped(q, CHANNEL_IOPUB, 12345);
        exec_queue_on_dropped(q, CHANNEL_IOPUB, 12345);
        probe = sent_since(since, "kernel_info_request");
        ok(probe != NULL, "dropped iopub: a probe goes out");
        is_int(json_array_size(d.streamed), 0, "dropped iopub: no marker before the kernel is heard from");
        feed_reply(q, id, "ok");
        feed_info(q, probe);
        feed_status(q, probe, "idle");
        ok(d.done && d.status == EXEC_OK, "dropped iopub: the reply and the probe end it, EXEC_OK");
        is_str(stext(d.outputs, "stderr"),
               "\n[output dropped: a message of more than 12345 bytes from the kernel (or a broken connection); "
               "what it sent on iopub meanwhile is lost]\n",
               "dropped iopub: the marker, once");
        is_int(json_array_size(d.streamed), 1, "dropped iopub: streamed once");

        /* A kernel that dies drops every connection: no marker for that. */
        since = n_sent;
        ok(submit_started(q, "spin", &opt, &d, id), "died: started");
        exec_queue_on_dropped(q, CHANNEL_IOPUB, 12345);
        exec_queue_on_dropped(q, CHANNEL_SHELL, 12345);
        exec_queue_detach(q, "killed by SIGKILL");
        exec_queue_attach(q, (KernelConn *) &fake_token, "kf2");
        ok(d.done && d.status == EXEC_DIED, "died: EXEC_DIED at the next attach");
        is_int(json_array_size(d.outputs), 0, "died: no dropped-message marker");
        memcpy(hs, sent_since(since, "kernel_info_request") ?: "", 37);
        feed_status(q, hs, "idle");

        /* A queued cell's deadline. */
        since = n_sent;
        ok(submit_started(q, "long", &opt, &d, id), "deadline: a long cell runs");
        opt.timeout = 100 * USEC_PER_MSEC;
        done_reset(&e);
        is_int(exec_queue_submit(q, "short", &opt, &sink, &e, NULL), 0, "deadline: a cell with a timeout queued");
        ok(RUN_UNTIL(e.done), "deadline: answered while still queued");
        is_int(e.status, EXEC_NOT_STARTED, "deadline: EXEC_NOT_STARTED");
        ok(e.message && strstr(e.message, "did not start within its timeout"), "deadline: says so (%s)",
           e.message ?: "(null)");
        ok(strstr(stext(e.outputs, "stderr"), "[not started: the cell did not start") != NULL,
           "deadline: in its outputs too");
        ok(!d.done && exec_queue_pending(q) == 0, "deadline: the running cell goes on, nothing queued");
        ok(!sent_since(since + 1, "execute_request"), "deadline: the short cell was never sent");
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "deadline: the long cell ends ok");
        opt.timeout = USEC_INFINITY;

        /* A flood of empty displays: each kept output counts 1 KiB against the limit. */
        opt.output_limit = 4096;
        ok(submit_started(q, "displays", &opt, &d, id), "empty displays: started");
        for (int i = 0; i < 1000; i++)
                feed(q, CHANNEL_IOPUB, "display_data", id,
                     json_pack("{s:{s:s}, s:{}}", "data", "text/plain", "", "metadata"));
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "empty displays: ok");
        is_int(count_outputs(d.outputs, "display_data"), 4, "empty displays: 4 kept under a limit of 4096");
        ok(strstr(stext(d.outputs, "stderr"), "[output truncated: limit of 4096 bytes reached]") != NULL,
           "empty displays: then the marker");
        ok(strstr(stext(d.outputs, "stderr"), "[output truncated: at least 1019904 more bytes not kept]") != NULL,
           "empty displays: and at least how much more came (996 x 1 KiB; the kernel gave no count)");
        opt.output_limit = default_opt.output_limit;

        exec_queue_free(q);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "states: uv_loop_close");
        done_reset(&d);
        done_reset(&e);
        json_decref(d.streamed);
        json_decref(e.streamed);
}

/* ---- The kernel's count of what a cell wrote ---- */

/* Runs a cell to its end with hand-built messages: a display of 10 bytes first (display_first) or last
 * (display_last), n stream messages of 1000 bytes, then its reply with the kernel's count written (none when
 * NULL) and its idle. Returns whether its execute_request asked for the count. */
static bool run_counted(ExecQueue *q, Done *d, int n, const char *written, bool display_first, bool display_last) {
        ExecOptions opt = default_opt;
        char id[37], text[1001];
        bool asked;

        memset(text, 'x', 1000);
        text[1000] = '\0';
        opt.output_limit = 4096;
        if (!submit_started(q, "cell", &opt, d, id))
                return false;
        asked = sent[(n_sent - 1) % ELEMENTSOF(sent)].counted;
        if (display_first)
                feed(q, CHANNEL_IOPUB, "display_data", id,
                     json_pack("{s:{s:s}, s:{}}", "data", "text/plain", "dddddddddd", "metadata"));
        for (int i = 0; i < n; i++)
                feed_stream(q, id, text);
        if (display_last)
                feed(q, CHANNEL_IOPUB, "display_data", id,
                     json_pack("{s:{s:s}, s:{}}", "data", "text/plain", "dddddddddd", "metadata"));
        if (written)
                feed(q, CHANNEL_SHELL, "execute_reply", id,
                     json_pack("{s:s, s:i, s:{s:{s:s, s:{s:s}}}}", "status", "ok", "execution_count", 9,
                               "user_expressions", CHUNKING_WRITTEN_EXPRESSION, "status", "ok", "data", "text/plain",
                               written));
        else
                feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        return asked;
}

#define LIMIT_MARKER "\n[output truncated: limit of 4096 bytes reached]\n"
#define LOST(w, d)                                                                                                    \
        "[output dropped: the kernel wrote " w " bytes to stdout and stderr, only " d " of them reached "             \
        "kernelsupd]\n"

static void test_count(void) {
        ExecQueue *q = NULL;
        Done d = { 0 };
        const char *hs;
        unsigned since;
        uint64_t cut;

        ok(uv_loop_init(&w.loop) == 0, "count: loop");
        uv_timer_init(&w.loop, &w.safety);
        w.busy = false;
        w.pid = 0;
        is_int(exec_queue_new(&w.loop, &fake_hooks, &w, &q), 0, "count: queue with a send hook");
        since = n_sent;
        exec_queue_attach(q, (KernelConn *) &fake_token, "kcount");
        hs = sent_since(since, "kernel_info_request");
        if (hs)
                feed_status(q, hs, "idle");

        ok(!run_counted(q, &d, 10, NULL, false, false), "count off: the execute_request asks for no count");
        is_str(stext(d.outputs, "stderr"), LIMIT_MARKER "[output truncated: at least 5904 more bytes not kept]\n",
               "count off: at least what came past the limit");

        exec_queue_count_written(q, true);
        ok(run_counted(q, &d, 10, "'10000'", false, false), "count on: the execute_request asks for the count");
        is_str(stext(d.outputs, "stderr"), LIMIT_MARKER "[output truncated: 5904 more bytes not kept]\n",
               "all 10000 bytes came: the cut, exact, and nothing lost");

        cut = exec_queue_counters(q)->output_cut;
        run_counted(q, &d, 10, "'20000'", false, false);
        is_str(stext(d.outputs, "stderr"),
               LIMIT_MARKER LOST("20000", "10000") "[output truncated: 15904 more bytes not kept]\n",
               "10000 of 20000 came: what was lost, and the cut counts it: exact");
        is_int(d.status, EXEC_OK, "lost: still ok");
        ok(exec_queue_counters(q)->output_cut - cut == 15904, "lost: the output_cut metric counts it too (%llu)",
           (unsigned long long) (exec_queue_counters(q)->output_cut - cut));

        run_counted(q, &d, 2, "'5000'", false, false);
        is_str(stext(d.outputs, "stderr"), "\n" LOST("5000", "2000"),
               "under the limit, 2000 of 5000 came: said, and no cut");
        run_counted(q, &d, 2, "'2000'", false, false);
        is_str(stext(d.outputs, "stderr"), "", "under the limit, all came: nothing said");

        run_counted(q, &d, 10, "'10'", false, false);
        is_str(stext(d.outputs, "stderr"), LIMIT_MARKER "[output truncated: at least 5904 more bytes not kept]\n",
               "a count below what came (a child process's writes, another thread's): no loss named, at least");
        run_counted(q, &d, 10, "''", false, false);
        is_str(stext(d.outputs, "stderr"), LIMIT_MARKER "[output truncated: at least 5904 more bytes not kept]\n",
               "an empty count (the patch gone): at least");

        /* 1034 for the display kept, 3062 bytes of text kept: 6938 cut; 10000 lost. */
        run_counted(q, &d, 10, "'20000'", true, false);
        is_str(stext(d.outputs, "stderr"),
               LIMIT_MARKER LOST("20000", "10000") "[output truncated: at least 16938 more bytes not kept]\n",
               "lost with a display in the cell (a display may be lost too, uncounted): at least");
        /* 5904 of text and a display of 1034 past the limit. */
        run_counted(q, &d, 10, "'10000'", false, true);
        is_str(stext(d.outputs, "stderr"), LIMIT_MARKER "[output truncated: at least 6938 more bytes not kept]\n",
               "a display cut (the kernel counts only stream text): at least");
        run_counted(q, &d, 1, "'1000'", true, false);
        is_str(stext(d.outputs, "stderr"), "", "a display and all the text came, under the limit: nothing said");

        /* A kernel may say anything: the largest count it can give is named, and adds up without wrapping. */
        run_counted(q, &d, 10, "'9999999999999999999'", false, false);
        is_str(stext(d.outputs, "stderr"),
               LIMIT_MARKER LOST("9999999999999999999", "10000") "[output truncated: 9999999999999995903 more bytes "
                                                                 "not kept]\n",
               "a count of 19 nines: said as the kernel says, the cut without wrapping");

        exec_queue_count_written(q, false);
        ok(!run_counted(q, &d, 1, "'1000'", false, false), "count off again: not asked");

        exec_queue_free(q);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "count: uv_loop_close");
        done_reset(&d);
        json_decref(d.streamed);
}

/* A kernel that handles shell requests side by side and publishes no execute_input (tslab): an interrupt of our
 * cell sends a kernel_info_request first and signals only once the kernel answered it (node loses a SIGINT that
 * reaches it while a cell's own code runs), or after a second without an answer (code that loops); a cell that
 * ends first is not signalled at all. */
static void test_side_by_side(void) {
        ExecQueue *q = NULL;
        Done d = { 0 };
        char id[37], hs[37], barrier[37];
        unsigned since, interrupts;
        uint64_t t0;

        ok(uv_loop_init(&w.loop) == 0, "side by side: loop");
        uv_timer_init(&w.loop, &w.safety);
        w.pid = 0;
        is_int(exec_queue_new(&w.loop, &fake_hooks, &w, &q), 0, "side by side: queue with a send hook");
        since = n_sent;
        exec_queue_attach(q, (KernelConn *) &fake_token, "kt");
        memcpy(hs, sent_since(since, "kernel_info_request") ?: "", 37);
        feed_status(q, hs, "busy");
        feed_status(q, hs, "idle");

        /* A cell that runs to its reply without an execute_input: the queue learns this kernel publishes none. */
        if (!ok(submit_started(q, "first", &default_opt, &d, id), "side by side: a first cell started"))
                goto out;
        feed_status(q, id, "busy");
        feed_stream(q, id, "x\n");
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "side by side: it ends EXEC_OK without an execute_input");

        /* An interrupt waits for the kernel's answer to the barrier. */
        if (!ok(submit_started(q, "await", &default_opt, &d, id), "barrier: a cell started"))
                goto out;
        feed_status(q, id, "busy");
        feed_stream(q, id, "started\n");
        since = n_sent;
        interrupts = w.interrupts;
        ok(exec_queue_interrupt(q), "barrier: interrupt says there was a cell");
        is_int(w.interrupts, interrupts, "barrier: no SIGINT before the kernel answered");
        memcpy(barrier, sent_since(since, "kernel_info_request") ?: "", 37);
        ok(barrier[0], "barrier: a kernel_info_request goes out instead");
        run_for(100);
        is_int(w.interrupts, interrupts, "barrier: still none while it is not answered");
        feed_status(q, barrier, "busy");
        feed_info(q, barrier);
        is_int(w.interrupts, interrupts + 1, "barrier: the SIGINT goes with its reply, once");
        feed_status(q, barrier, "idle");
        feed_stream(q, id, "Error: Interrupted asynchronously\n");
        feed_reply(q, id, "error");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_ERROR, "barrier: the cell ends with its error (%s)",
           d.done ? exec_status_to_string(d.status) : "not done");
        ok(!strstr(stext(d.outputs, "stderr"), NO_REPLY), "barrier: with its reply, no marker");
        is_int(w.interrupts, interrupts + 1, "barrier: one SIGINT in all");

        /* Code that keeps the kernel from answering gets the SIGINT after a second all the same. */
        if (!ok(submit_started(q, "loop", &default_opt, &d, id), "loop: a cell started"))
                goto out;
        feed_status(q, id, "busy");
        interrupts = w.interrupts;
        t0 = uv_now(&w.loop);
        ok(exec_queue_interrupt(q), "loop: interrupted");
        ok(RUN_UNTIL(w.interrupts > interrupts), "loop: the SIGINT goes without the barrier's reply");
        ok(uv_now(&w.loop) - t0 >= 900, "loop: after about a second (%llu ms)",
           (unsigned long long) (uv_now(&w.loop) - t0));
        feed_reply(q, id, "error");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_ERROR, "loop: the cell ends with its error");

        /* A cell that ends before the barrier is answered gets no SIGINT, then or later. */
        if (!ok(submit_started(q, "quick", &default_opt, &d, id), "ended first: a cell started"))
                goto out;
        feed_status(q, id, "busy");
        since = n_sent;
        interrupts = w.interrupts;
        ok(exec_queue_interrupt(q), "ended first: interrupted");
        memcpy(barrier, sent_since(since, "kernel_info_request") ?: "", 37);
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d.done && d.status == EXEC_OK, "ended first: EXEC_OK");
        feed_info(q, barrier);
        run_for(1200);
        is_int(w.interrupts, interrupts, "ended first: no SIGINT after the cell ended");

out:
        exec_queue_free(q);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "side by side: uv_loop_close");
        done_reset(&d);
        json_decref(d.streamed);
}

int main(void) {
        test_no_kernel();
        test_states();
        test_count();
        test_side_by_side();
        (void) stext(NULL, NULL);
        return tap_done();
}

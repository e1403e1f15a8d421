/* Tests of the cell queue with other clients of the kernel, driven by
 * hand-built messages through a fake send hook: status shows their cells,
 * interrupt reaches them, ours wait behind them, gates and withdrawals when
 * their idle is lost, and hostile statuses. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-world.h"

/* ---- Other clients of the kernel, driven by hand-built messages ---- */

/* The index of the last request of that type sent at or after since, or -1. */
static int sent_index(unsigned since, const char *type) {
        for (unsigned i = n_sent; i > since; i--)
                if (streq(sent[(i - 1) % ELEMENTSOF(sent)].type, type))
                        return (int) ((i - 1) % ELEMENTSOF(sent));
        return -1;
}

/* An iopub status whose parent names its type, as a real one does (another client's, or ours). */
static void feed_other(ExecQueue *q, const char *parent, const char *parent_type, const char *state) {
        JupyterMsg m;

        if (jupyter_msg_new("status", "kernel-session", json_pack("{s:s}", "execution_state", state), &m) < 0)
                return;
        json_object_set_new(m.parent_header, "msg_id", json_string(parent));
        json_object_set_new(m.parent_header, "msg_type", json_string(parent_type));
        json_object_set_new(m.parent_header, "session", json_string("another-client"));
        exec_queue_on_iopub(q, &m);
        jupyter_msg_done(&m);
}

static void feed_other_input(ExecQueue *q, const char *parent, int count) {
        feed(q, CHANNEL_IOPUB, "execute_input", parent,
             json_pack("{s:s, s:i}", "code", "time.sleep(6)", "execution_count", count));
}

static const char *running(ExecQueue *q) {
        return exec_queue_running(q) ?: "(none)";
}

/* Another client's cell: status shows it, interrupt reaches it, ours waits. */
static void test_other_busy(ExecQueue *q, Done *d) {
        ExecOptions opt = default_opt;
        unsigned since = n_sent, interrupts = w.interrupts, busy_true = w.busy_true, since_gate;
        const char *gate, *id;

        feed_other(q, "other-1", "execute_request", "busy");
        feed_other_input(q, "other-1", 41);
        ok(exec_queue_busy(q) && w.busy, "other: busy with another client's cell");
        is_int(w.busy_true, busy_true + 1, "other: busy(true) told once");
        is_str(running(q), "other", "other: running \"other\"");
        is_int(exec_queue_execution_count(q), 41, "other: the kernel's count from its execute_input");
        gate = sent_since(since, "kernel_info_request");
        ok(gate != NULL, "other: a kernel_info_request goes behind the other cell");
        since_gate = n_sent;
        ok(exec_queue_interrupt(q), "other: interrupt says there was a cell");
        is_int(w.interrupts, interrupts + 1, "other: the interrupt hook ran");
        ok(sent_index(since_gate, "kernel_info_request") < 0, "other: no probe for another client's cell");

        /* A control request of another client comes and goes: the shell is still busy. */
        feed_other(q, "ctl-1", "interrupt_request", "busy");
        feed_other(q, "ctl-1", "interrupt_request", "idle");
        is_str(running(q), "other", "other: a control request's idle does not end the cell");

        done_reset(d);
        is_int(exec_queue_submit(q, "mine = 1", &opt, &sink, d, NULL), 0, "other: submit ours");
        ok(sent_index(since, "execute_request") < 0, "other: ours waits while the kernel is busy");
        is_int(exec_queue_pending(q), 1, "other: queued with us");
        ok(sent_since(since, "kernel_info_request") == gate, "other: one gate for one cell of the other client");
        feed_other(q, "other-1", "execute_request", "idle");
        id = sent_since(since, "execute_request");
        ok(id != NULL, "other: its idle sends ours");
        is_str(running(q), "ours", "other: then running \"ours\"");
        ok(w.busy, "other: still busy, without a flicker");
        is_int(w.busy_true, busy_true + 1, "other: busy(true) still told once");
        if (!id)
                return;
        feed_status(q, id, "busy");
        feed_input(q, id);
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d->done && d->status == EXEC_OK, "other: ours ran after it, EXEC_OK");
        ok(!exec_queue_busy(q) && !w.busy, "other: not busy once the kernel is idle");
        ok(exec_queue_running(q) == NULL, "other: running null");
        if (gate) {
                feed_info(q, gate);
                feed_status(q, gate, "busy");
                feed_status(q, gate, "idle");
        }
        ok(!w.busy, "other: the gate's round trip leaves it idle");
}

/* Another client's idle is lost: the gate's reply frees our cell. */
static void test_other_lost_idle(ExecQueue *q, Done *d) {
        unsigned since = n_sent;
        const char *gate, *id;

        feed_other(q, "other-2", "execute_request", "busy");
        done_reset(d);
        is_int(exec_queue_submit(q, "mine = 2", &default_opt, &sink, d, NULL), 0, "lost other idle: submit");
        gate = sent_since(since, "kernel_info_request");
        ok(gate != NULL && sent_index(since, "execute_request") < 0, "lost other idle: ours waits, a gate goes out");
        if (!gate)
                return;
        feed_info(q, gate);
        id = sent_since(since, "execute_request");
        ok(id != NULL, "lost other idle: the gate's reply sends ours");
        if (!id)
                return;
        feed_input(q, id);
        feed_reply(q, id, "ok");
        feed_status(q, id, "idle");
        ok(d->done && d->status == EXEC_OK && !w.busy, "lost other idle: ours ends ok, not busy");

        /* With nothing of ours waiting: the round trip behind it still ends the busy state. */
        since = n_sent;
        feed_other(q, "other-7", "execute_request", "busy");
        gate = sent_since(since, "kernel_info_request");
        ok(gate != NULL && w.busy, "lost other idle, nothing waiting: busy, a gate goes out");
        if (gate)
                feed_info(q, gate);
        ok(!exec_queue_busy(q) && !w.busy, "lost other idle, nothing waiting: the gate's reply ends it");

        /* Dropped connections: the gate's reply still comes after an iopub drop; after a shell drop it is asked again.
         */
        since = n_sent;
        feed_other(q, "other-8", "execute_request", "busy");
        gate = sent_since(since, "kernel_info_request");
        exec_queue_on_dropped(q, CHANNEL_IOPUB, 12345);
        ok(gate && sent_since(since, "kernel_info_request") == gate, "dropped iopub: the gate stands");
        exec_queue_on_dropped(q, CHANNEL_SHELL, 12345);
        id = sent_since(since, "kernel_info_request");
        ok(id && id != gate, "dropped shell: a new gate goes out");
        ok(w.busy, "dropped shell: still busy with the other cell");
        if (id)
                feed_info(q, id);
        ok(!exec_queue_busy(q) && !w.busy, "dropped shell: the new gate's reply ends it");
}

/* Ours is sent, but another client's request reached the shell first. */
static void test_behind_other(ExecQueue *q, Done *d) {
        ExecOptions opt = default_opt;
        unsigned since = n_sent, interrupts = w.interrupts;
        const char *id;
        int abort_i;
        char mine[37];
        Done next = { 0 };

        opt.timeout = 200 * USEC_PER_MSEC;
        ok(submit_started(q, "behind = 1", &opt, d, mine), "behind: ours sent while the kernel is idle");
        feed_other(q, "other-3", "execute_request", "busy");
        feed_other_input(q, "other-3", 50);
        is_str(running(q), "other", "behind: running \"other\" though ours is sent");
        ok(RUN_UNTIL(d->done), "behind: answered at its deadline");
        is_int(d->status, EXEC_NOT_STARTED, "behind: EXEC_NOT_STARTED");
        ok(d->message && strstr(d->message, "withdrawn and will not run"), "behind: says so (%s)",
           d->message ?: "(null)");
        ok(strstr(stext(d->outputs, "stderr"), "[not started: ") != NULL, "behind: in its outputs too");
        is_int(w.interrupts, interrupts, "behind: nothing interrupted");
        abort_i = sent_index(since, "abort_request");
        ok(abort_i >= 0 && sent[abort_i].channel == CHANNEL_CONTROL && streq(sent[abort_i].arg, mine),
           "behind: an abort_request on control names ours");
        ok(w.busy, "behind: still busy: the other cell runs");

        /* Another of ours waits for the withdrawn one to leave the kernel. */
        since = n_sent;
        done_reset(&next);
        is_int(exec_queue_submit(q, "after = 1", &default_opt, &sink, &next, NULL), 0, "behind: another cell");
        feed_other(q, "other-3", "execute_request", "idle");
        ok(sent_index(since, "execute_request") < 0,
           "behind: it is not sent while the withdrawn one is in the kernel");
        feed_reply(q, mine, "aborted"); /* ipykernel: no idle after this one */
        id = sent_since(since, "execute_request");
        ok(id != NULL, "behind: the aborted reply of the withdrawn one sends it");
        if (id) {
                feed_input(q, id);
                feed_reply(q, id, "ok");
                feed_status(q, id, "idle");
        }
        ok(next.done && next.status == EXEC_OK, "behind: it ran, EXEC_OK");
        ok(!exec_queue_busy(q) && !w.busy, "behind: not busy afterwards");
        feed_other(q, mine, "execute_request", "busy"); /* iopub lags shell: its busy comes after the reply */
        ok(!exec_queue_busy(q) && !w.busy, "behind: a late busy of the answered request is no cell");
        is_int(w.interrupts, interrupts, "behind: still nothing interrupted");

        /* The same, but the abort crossed its start: ours is interrupted as it starts. */
        ok(submit_started(q, "behind = 2", &opt, d, mine), "crossed: ours sent");
        feed_other(q, "other-4", "execute_request", "busy");
        ok(RUN_UNTIL(d->done) && d->status == EXEC_NOT_STARTED, "crossed: not started at its deadline");
        feed_other(q, "other-4", "execute_request", "idle");
        is_int(w.interrupts, interrupts, "crossed: nothing interrupted while the other ran");
        feed_status(q, mine, "busy");
        feed_input(q, mine);
        is_int(w.interrupts, interrupts + 1, "crossed: ours interrupted as it starts");
        feed_reply(q, mine, "error");
        feed_status(q, mine, "idle");
        id = sent_since(since, "kernel_info_request");
        if (id) {
                feed_info(q, id);
                feed_status(q, id, "idle");
        }
        ok(!exec_queue_busy(q) && !w.busy, "crossed: not busy afterwards");

        /* A client that goes away while ours is behind another: withdrawn, no interrupt. */
        ExecCell *cell = NULL;
        since = n_sent;
        done_reset(d);
        is_int(exec_queue_submit(q, "behind = 3", &default_opt, &sink, d, &cell), 0, "cancel: submitted");
        id = sent_since(since, "execute_request");
        feed_other(q, "other-5", "execute_request", "busy");
        exec_cell_cancel(cell);
        ok(id && sent_index(since, "abort_request") >= 0 && streq(sent[sent_index(since, "abort_request")].arg, id),
           "cancel: withdrawn with an abort_request");
        is_int(w.interrupts, interrupts + 1, "cancel: nothing interrupted");
        ok(!d->done, "cancel: no answer for a cancelled cell");
        feed_other(q, "other-5", "execute_request", "idle");
        if (id) {
                feed_status(q, id, "busy");
                feed_reply(q, id, "aborted");
        }
        ok(!w.busy, "cancel: not busy afterwards");

        /* Ours still queued here (not sent) when its deadline passes behind another client's cell. */
        since = n_sent;
        feed_other(q, "other-6", "execute_request", "busy");
        done_reset(d);
        is_int(exec_queue_submit(q, "behind = 4", &opt, &sink, d, NULL), 0, "queued: submitted behind another");
        ok(RUN_UNTIL(d->done), "queued: answered at its deadline");
        is_int(d->status, EXEC_NOT_STARTED, "queued: EXEC_NOT_STARTED");
        ok(d->message && strstr(d->message, "another client's request"), "queued: names the other client (%s)",
           d->message ?: "(null)");
        ok(sent_index(since, "execute_request") < 0 && sent_index(since, "abort_request") < 0,
           "queued: never sent, nothing to abort");
        is_int(w.interrupts, interrupts + 1, "queued: nothing interrupted");
        feed_other(q, "other-6", "execute_request", "idle");
        ok(!exec_queue_busy(q) && !w.busy, "queued: not busy once the kernel is idle");
        is_int(exec_queue_pending(q), 0, "queued: nothing left in the queue");
        done_reset(&next);
        json_decref(next.streamed);
}

/* What other clients (or a hostile one) make the kernel publish: long ids, floods, junk. */
static void test_other_hostile(ExecQueue *q) {
        size_t len = 1024 * 1024;
        char *big = malloc(len + 1);
        char id[32];
        JupyterMsg m;
        long long count;

        if (!ok(big != NULL, "hostile: allocation"))
                return;
        memset(big, 'a', len);
        big[len] = '\0';
        feed_other(q, big, "execute_request", "busy");
        is_str(running(q), "other", "hostile: a 1 MiB parent msg_id is followed");
        big[len - 1] = 'b';
        feed_other(q, big, "execute_request", "idle");
        is_str(running(q), "other", "hostile: an idle of another 1 MiB id does not end it");
        big[len - 1] = 'a';
        feed_other(q, big, "execute_request", "idle");
        ok(!exec_queue_busy(q), "hostile: its own idle does");
        free(big);

        /* 100000 busy statuses without an idle: one request is remembered, the last. */
        for (int i = 0; i < 100000; i++) {
                snprintf(id, sizeof id, "flood-%d", i);
                feed_other(q, id, "execute_request", "busy");
        }
        feed_other(q, "flood-99999", "execute_request", "idle");
        ok(!exec_queue_busy(q) && !w.busy, "hostile: after a flood of busy, the last one's idle ends it");

        /* Junk: no parent, a parent msg_id that is not a string, no execution_state, a count that is not a number. */
        feed_other(q, "", "execute_request", "busy");
        if (jupyter_msg_new("status", "kernel-session", json_pack("{s:s}", "execution_state", "busy"), &m) >= 0) {
                json_object_set_new(m.parent_header, "msg_id", json_integer(7));
                exec_queue_on_iopub(q, &m);
                jupyter_msg_done(&m);
        }
        feed(q, CHANNEL_IOPUB, "status", "junk-1", json_object());
        ok(!exec_queue_busy(q), "hostile: statuses without a parent or a state are no cell");
        count = exec_queue_execution_count(q);
        feed(q, CHANNEL_IOPUB, "execute_input", "junk-2", json_pack("{s:s}", "execution_count", "many"));
        ok(count >= 0 && exec_queue_execution_count(q) == count, "hostile: a count that is not a number is ignored");
}

static void test_clients(void) {
        ExecQueue *q = NULL;
        Done d = { 0 };
        const char *hs;
        unsigned since;

        ok(uv_loop_init(&w.loop) == 0, "clients: loop");
        uv_timer_init(&w.loop, &w.safety);
        w.busy_true = w.busy_false = 0;
        w.busy = false;
        w.pid = 0;
        is_int(exec_queue_new(&w.loop, &fake_hooks, &w, &q), 0, "clients: queue with a send hook");
        since = n_sent;
        exec_queue_attach(q, (KernelConn *) &fake_token, "kc");
        hs = sent_since(since, "kernel_info_request");
        if (hs) {
                feed_status(q, hs, "busy");
                feed_status(q, hs, "idle");
        }
        ok(!w.busy && w.busy_true == 0, "clients: our handshake is no cell");

        test_other_busy(q, &d);
        test_other_lost_idle(q, &d);
        test_behind_other(q, &d);
        test_other_hostile(q);

        exec_queue_free(q);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "clients: uv_loop_close");
        done_reset(&d);
        json_decref(d.streamed);
}

int main(void) {
        test_clients();
        (void) stext(NULL, NULL);
        return tap_done();
}

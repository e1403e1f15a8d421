/* The per-context cell queue: see exec.h. Pure libuv and jupyter.h; it never
 * logs, its outcomes go to the sinks. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "exec-cell.h"
#include "quirks.h"
#include "util.h"

/* A kernel that has just answered an execute_request with an error aborts
 * execute_requests that reach it before it has finished aborting (ipykernel's
 * stop_on_error). Such a cell never ran, so it is sent again this many times. */
#define ABORTED_RETRIES 3
/* ... after this long times the attempt: tslab aborts what reaches it within 200 ms of an error, so a cell sent
 * again at once would be aborted each time. */
#define ABORTED_RESEND_MSEC 300
/* What the slot holds while such a cell waits to be sent again: no message of the kernel's has it as parent. */
#define RESEND_PENDING "(aborted; to be sent again)"
/* The longest an interrupt of a kernel that handles shell requests side by side waits for the kernel to answer
 * the barrier (see run_interrupt): a cell whose code keeps the kernel from answering gets the SIGINT then. */
#define INTERRUPT_BARRIER_MSEC 1000
const double exec_duration_bounds[EXEC_DURATION_BUCKETS] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                             2.5,  5,     10,   30,  60,   300 };

static const char *const status_names[_EXEC_STATUS_MAX] = {
        [EXEC_OK] = "ok",
        [EXEC_ERROR] = "error",
        [EXEC_TIMEOUT] = "timeout",
        [EXEC_DIED] = "died",
        [EXEC_ABORTED] = "aborted",
        [EXEC_NOT_STARTED] = "not_started",
        [EXEC_KERNEL_ABORTED] = "kernel_aborted",
};

const char *exec_status_to_string(ExecStatus s) {
        return (unsigned) s < _EXEC_STATUS_MAX ? status_names[s] : NULL;
}

void exec_result_reply(const ExecResult *res, ReplyExecResult *ret) {
        *ret = (ReplyExecResult){
                .status = exec_status_to_string(res->status),
                .execution_count = res->execution_count >= 0 ? res->execution_count : -1,
                .kernel_id = res->kernel_id,
                .outputs = res->outputs,
                .message = res->message,
                .exit = res->exit,
        };
}

/* ---- Cells ---- */

void queue_unlink(ExecQueue *q, ExecCell *cell) {
        if (!cell->queued)
                return;
        if (cell->prev)
                cell->prev->next = cell->next;
        else
                q->head = cell->next;
        if (cell->next)
                cell->next->prev = cell->prev;
        else
                q->tail = cell->prev;
        cell->prev = cell->next = NULL;
        cell->queued = false;
        q->n_pending--;
}

static void queue_append(ExecQueue *q, ExecCell *cell) {
        cell->prev = q->tail;
        cell->next = NULL;
        if (q->tail)
                q->tail->next = cell;
        else
                q->head = cell;
        q->tail = cell;
        cell->queued = true;
        q->n_pending++;
}

static usec_t deadline_after(usec_t timeout) {
        usec_t now = now_usec(CLOCK_MONOTONIC);

        return timeout >= USEC_INFINITY - now ? USEC_INFINITY : now + timeout;
}

static void touch(ExecQueue *q) {
        q->last_activity = now_usec(CLOCK_REALTIME);
}

/* ---- The queue ---- */

void queue_advance(ExecQueue *q);
static void settle_cb(uv_timer_t *t);
static void run_mark_drop(ExecQueue *q);

/* The metrics of an answered cell. */
static void count_answer(ExecCounters *m, const ExecCell *cell, ExecStatus status) {
        m->cells[status]++;
        m->output_cut += cell->cut;
        if (cell->started > 0) {
                double sec = (double) (now_usec(CLOCK_MONOTONIC) - cell->started) / 1e6;
                size_t b = 0;

                while (b < EXEC_DURATION_BUCKETS && sec > exec_duration_bounds[b])
                        b++;
                m->duration[b]++;
                m->duration_sum += sec;
        }
}

void cell_answer(ExecCell *cell, ExecStatus status, const char *kernel_id, const char *message) {
        ExecResult res = {
                .status = status,
                .execution_count = cell->execution_count,
                .kernel_id = kernel_id,
                .outputs = cell->outputs,
                .message = message,
                .exit = cell->exit_asked > 0   ? "kept"
                        : cell->exit_asked < 0 ? "ending"
                                               : NULL,
        };

        cell_summarize(cell);
        (void) cell_flush_stream(cell);
        count_answer(&cell->q->counters, cell, status);
        cell->sink.on_done(cell->userdata, &res);
        cell_free(cell);
}

void run_clear(ExecQueue *q) {
        q->run.msg_id[0] = '\0';
        q->run.cell = NULL;
        q->run.got_reply = q->run.got_idle = false;
        q->run.auto_interrupted = q->run.in_grace = false;
        q->run.started = q->run.withdrawn = false;
        q->run.probe_id[0] = '\0';
        q->run.probe_replied = q->run.probe_idle = q->run.probe_waited = false;
        q->run.drop_pending = 0;
        q->run.iopub_moved = false;
        q->run.saw_input = false;
        q->run.barrier_id[0] = '\0';
        q->run.interrupted_at = q->run.kill_after = 0;
        (void) uv_timer_stop(&q->barrier);
        (void) uv_timer_stop(&q->kill);
        (void) uv_timer_stop(&q->timer);
        (void) uv_timer_stop(&q->settle);
        (void) uv_timer_stop(&q->resend);
}

static void settle_start(ExecQueue *q) {
        if (uv_is_active((uv_handle_t *) &q->settle))
                return;
        q->run.iopub_moved = false;
        (void) uv_timer_start(&q->settle, settle_cb, EXEC_SETTLE_USEC / USEC_PER_MSEC, 0);
}

/* Asks the kernel, behind the running request on shell, for a
 * kernel_info_reply: shell requests are handled in order, so its reply says
 * the kernel has left the request, whether it answered it or not. A newer
 * probe replaces an older one (whose reply or idle may have been lost). */
static void run_probe(ExecQueue *q) {
        char id[37];

        if (!run_taken(q) || !q->conn)
                return;
        (void) uv_timer_stop(&q->settle);
        q->run.probe_replied = q->run.probe_idle = q->run.probe_waited = false;
        if (queue_send(q, CHANNEL_SHELL, "kernel_info_request", json_object(), id) < 0) {
                q->run.probe_id[0] = '\0';
                settle_start(q); /* try again */
                return;
        }
        memcpy(q->run.probe_id, id, sizeof id);
}

static void run_finish(ExecQueue *q);
static void resend_cb(uv_timer_t *t);

/* Ends the running request once the kernel is known to be done with it
 * (see exec.h), or arms the timer that finds out. */
static void run_check(ExecQueue *q) {
        if (!run_taken(q))
                return;
        /* Answered before the request said it ended (neither its reply nor its idle came): a kernel that handles
         * shell requests side by side (tslab) answers the probe while the interrupted cell is still ending, so
         * its reply is waited for once more. */
        if (q->run.probe_replied && q->run.probe_idle && !q->run.got_reply && !q->run.got_idle &&
            !q->run.probe_waited) {
                q->run.probe_waited = true;
                (void) uv_timer_stop(&q->settle);
                settle_start(q);
                return;
        }
        if ((q->run.got_reply && q->run.got_idle) || (q->run.probe_replied && q->run.probe_idle)) {
                run_finish(q);
                return;
        }
        if (q->run.probe_replied || (!q->run.probe_id[0] && (q->run.got_reply || q->run.got_idle)))
                settle_start(q);
}

static void settle_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;

        if (!run_taken(q))
                return;
        /* iopub is behind shell (a flood the kernel writes faster than we
         * read): what is missing comes in order behind what still arrives. */
        if (q->run.iopub_moved) {
                settle_start(q);
                return;
        }
        if (q->run.probe_replied) {
                /* The probe's idle was lost too: iopub dropped messages. */
                q->run.probe_idle = true;
                run_check(q);
        } else
                run_probe(q);
}

/* The barrier was answered (or did not come in time): the SIGINT goes now, and the probe follows once a settle
 * period passed without the cell's reply (see run_interrupt). */
static void run_interrupt_now(ExecQueue *q) {
        q->run.barrier_id[0] = '\0';
        (void) uv_timer_stop(&q->barrier);
        if (q->hooks.interrupt)
                q->hooks.interrupt(q->userdata);
        settle_start(q);
}

static void barrier_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;

        if (run_taken(q) && q->run.barrier_id[0])
                run_interrupt_now(q);
}

/* Interrupts our running request. A kernel that handles shell requests in order is signalled at once and then
 * probed behind the request on shell: the probe's reply says it has left the request (an interrupt that lands
 * after the code finished draws no execute_reply).
 *
 * tslab (seen as a kernel that publishes no execute_input) handles shell requests side by side, so a probe says
 * nothing there; and a SIGINT that reaches it while a cell's own code still runs or is being wound up (node's
 * vm runs that code with breakOnSigint, with the kernel's SIGINT handler taken off) does not end the cell: it
 * is lost, and may even be kept by node and end the next cell's code. Such a kernel first gets a
 * kernel_info_request, the barrier: it answers none while a cell's code runs, so its reply says the cell waits
 * (an await), where the kernel's own handler takes the SIGINT and ends it. A cell that keeps the kernel from
 * answering (code that loops) gets the SIGINT after INTERRUPT_BARRIER_MSEC all the same; one that ends first
 * gets none. Its reply is waited for a settle period, then the kernel is probed. */
static void run_interrupt(ExecQueue *q) {
        interrupt_watch(q);
        if (!q->no_execute_input) {
                if (q->hooks.interrupt)
                        q->hooks.interrupt(q->userdata);
                run_probe(q);
                return;
        }
        if (q->run.barrier_id[0])
                return; /* one already waits */
        if (!q->conn || queue_send(q, CHANNEL_SHELL, "kernel_info_request", json_object(), q->run.barrier_id) < 0) {
                run_interrupt_now(q);
                return;
        }
        (void) uv_timer_start(&q->barrier, barrier_cb, INTERRUPT_BARRIER_MSEC, 0);
}

static void auto_interrupt(ExecQueue *q) {
        if (q->run.auto_interrupted)
                return;
        q->run.auto_interrupted = true;
        if (q->run.cell)
                q->run.cell->interrupted = true;
        q->counters.interrupts++;
        run_interrupt(q);
}

/* Our cell was sent, but the kernel has not started it: another client's
 * request reached the shell first and runs. It is taken back without
 * interrupting anything: ipykernel answers an execute_request named in an
 * abort_request "aborted" without running it; the slot stays taken until
 * the kernel gets to it, and should it start all the same, it is
 * interrupted then (run_mark_started). */
static void run_withdraw(ExecQueue *q) {
        json_t *content;

        q->run.cell = NULL;
        q->run.in_grace = false;
        q->run.withdrawn = true;
        (void) uv_timer_stop(&q->timer);
        /* The kernel aborted it and it waits to be sent again: no kernel holds it, and no message of the
         * kernel's will ever free the slot; resend_cb does, on the loop, after the caller's answer. */
        if (streq(q->run.msg_id, RESEND_PENDING)) {
                (void) uv_timer_start(&q->resend, resend_cb, 0, 0);
                return;
        }
        content = json_pack("{s:[s]}", "msg_ids", q->run.msg_id);
        if (content)
                (void) queue_send(q, CHANNEL_CONTROL, "abort_request", content, NULL);
}

/* The kernel started our request (execute_input, an output or a reply). */
static void run_mark_started(ExecQueue *q) {
        if (q->run.started)
                return;
        q->run.started = true;
        if (q->run.withdrawn)
                auto_interrupt(q); /* ours, and its caller was told it would not run */
}

/* Why a cell of ours has not started, when it is that the kernel answers nothing: NULL otherwise. */
static const char *kernel_unresponsive(ExecQueue *q, const char *then, char *buf, size_t size) {
        usec_t silent = q->hooks.unresponsive_for ? q->hooks.unresponsive_for(q->userdata) : 0;
        char d[32];

        if (silent == 0)
                return NULL;
        snprintf(buf, size, "the kernel is unresponsive (no heartbeat answer for %s)%s",
                 format_duration(d, sizeof d, silent), then);
        return buf;
}

/* A cell answered EXEC_NOT_STARTED: it never ran, nothing was interrupted. */
static void answer_not_started(ExecQueue *q, ExecCell *cell, const char *why) {
        char d[32], msg[320], note[360];

        snprintf(msg, sizeof msg, "the cell did not start within its timeout of %s: %s",
                 format_duration(d, sizeof d, cell->opt.timeout), why);
        snprintf(note, sizeof note, "[not started: %s]\n", msg);
        cell_note(cell, note);
        cell_answer(cell, EXEC_NOT_STARTED, q->conn ? q->kernel_id : NULL, msg);
}

static void timer_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;
        ExecCell *cell = q->run.cell;
        char d[32], msg[256], why[160];

        if (!cell)
                return;
        if (!q->run.started) {
                const char *silent =
                        kernel_unresponsive(q, "; the cell was withdrawn and will not run", why, sizeof why);
                bool resend = streq(q->run.msg_id, RESEND_PENDING);

                run_withdraw(q);
                answer_not_started(q, cell,
                                   silent   ? silent
                                   : resend ? "the kernel aborted it unrun each time it was sent (a kernel aborts "
                                              "the cells sent just after one that raised); the cell was withdrawn "
                                              "and will not run"
                                   : kernel_busy_other(q)
                                           ? "another client's request reached the kernel first and was "
                                             "still running; the cell was withdrawn and will not run"
                                           : "the kernel had not started it (another client's request "
                                             "may have reached it first); the cell was withdrawn and "
                                             "will not run");
                queue_update_busy(q);
                return;
        }
        if (!q->run.in_grace) {
                cell->timed_out = true;
                q->run.in_grace = true;
                auto_interrupt(q);
                /* With a kill_after, the kill comes first and its answer says so; this one is for a kill that
                 * did not end the kernel. */
                (void) uv_timer_start(&q->timer, timer_cb,
                                      (EXEC_INTERRUPT_GRACE_USEC + q->run.kill_after) / USEC_PER_MSEC, 0);
                return;
        }

        /* The kernel did not answer the interrupt: answer without it, and keep
         * the slot until the kernel is done, discarding what comes. */
        snprintf(msg, sizeof msg,
                 "the cell ran longer than its timeout of %s and did not stop within %llu s of the interrupt; "
                 "the kernel may still be running it (status shows it; exec --kill-after kills the kernel then)",
                 format_duration(d, sizeof d, cell->opt.timeout), EXEC_INTERRUPT_GRACE_USEC / USEC_PER_SEC);
        q->run.cell = NULL;
        cell_answer(cell, EXEC_TIMEOUT, q->kernel_id, msg);
}

static int send_execute(ExecQueue *q, ExecCell *cell, char ret_msg_id[37]) {
        json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", cell->code, "silent", 0,
                                    "store_history", 1, "user_expressions", "allow_stdin", 0, "stop_on_error", 1);

        if (content && q->count_written &&
            json_object_set_new(json_object_get(content, "user_expressions"), CHUNKING_WRITTEN_EXPRESSION,
                                json_string(CHUNKING_WRITTEN_CODE)) < 0) {
                json_decref(content);
                return -ENOMEM;
        }

        if (!content)
                return -ENOMEM;
        return queue_send(q, CHANNEL_SHELL, "execute_request", content, ret_msg_id);
}

/* Sends cell and makes it the running one. */
static int queue_start(ExecQueue *q, ExecCell *cell) {
        char id[37];
        int r;

        r = send_execute(q, cell, id);
        if (r < 0)
                return r;
        run_clear(q);
        memcpy(q->run.msg_id, id, sizeof id);
        q->run.cell = cell;
        q->run.kill_after = cell->opt.kill_after;
        cell->started = now_usec(CLOCK_MONOTONIC);
        if (cell->sink.on_start)
                cell->sink.on_start(cell->userdata, q->kernel_id);
        if (cell->deadline != USEC_INFINITY) {
                /* What is left of the timeout after the wait in the queue. */
                usec_t now = now_usec(CLOCK_MONOTONIC);
                usec_t left = cell->deadline > now ? cell->deadline - now : 0;

                (void) uv_timer_start(&q->timer, timer_cb, (left + USEC_PER_MSEC - 1) / USEC_PER_MSEC, 0);
        }
        queue_update_busy(q);
        return 0;
}

/* Our next cell waits for another client's request alone: gate it. */
static void queue_gate(ExecQueue *q) {
        if (q->head && q->conn && q->iopub_ready && !run_taken(q) && !q->died && kernel_busy_other(q))
                kernel_gate(q);
}

static bool queue_can_start(const ExecQueue *q) {
        return q->conn && q->iopub_ready && !run_taken(q) && !q->died && !kernel_busy_other(q) && !q->ending;
}

void queue_advance(ExecQueue *q) {
        while (queue_can_start(q) && q->head) {
                ExecCell *cell = q->head;
                char msg[160];
                int r;

                queue_unlink(q, cell);
                r = queue_start(q, cell);
                if (r >= 0)
                        return;
                snprintf(msg, sizeof msg, "the cell could not be sent to the kernel: %s", strerror(-r));
                cell_answer(cell, EXEC_ABORTED, q->kernel_id, msg);
        }
        queue_gate(q);
        queue_update_busy(q);
}

/* The kernel is done with the running request (reply and idle both came). */
/* A cell the kernel aborted unrun goes out again (see exec_queue_on_reply); one that cannot is answered as aborted. */
static void resend_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;
        ExecCell *cell = q->run.cell;
        char id[37];

        if (!streq(q->run.msg_id, RESEND_PENDING))
                return;
        /* Withdrawn while it waited (run_withdraw): it is in no kernel, and the slot is free now. */
        if (!cell)
                return run_finish(q);
        if (q->conn && send_execute(q, cell, id) >= 0) {
                memcpy(q->run.msg_id, id, sizeof id);
                return;
        }
        free(cell->reply_status);
        cell->reply_status = strdup("aborted");
        q->run.got_reply = true;
        run_finish(q);
}

static void run_finish(ExecQueue *q) {
        ExecCell *cell = q->run.cell;
        ExecStatus status;
        char d[32], msg[256];
        const char *message = NULL;
        bool replied = q->run.got_reply;

        /* A cell that ran to its reply without an execute_input: this kernel publishes none. */
        if (replied && !q->run.saw_input && cell && cell->reply_status && !streq(cell->reply_status, "aborted"))
                q->no_execute_input = true;
        run_clear(q);
        if (cell) {
                if (!replied)
                        cell_note(cell,
                                  "\n[no reply: the kernel sent no reply to the cell (interrupted after its code "
                                  "finished, or the reply was lost)]\n");
                if (cell->timed_out) {
                        status = EXEC_TIMEOUT;
                        snprintf(msg, sizeof msg, "the cell ran longer than its timeout of %s and was interrupted%s",
                                 format_duration(d, sizeof d, cell->opt.timeout),
                                 replied ? "" : "; the kernel sent no reply to it");
                        message = msg;
                } else if (!replied) {
                        status = EXEC_ABORTED;
                        message = "the kernel sent no reply to the cell (interrupted after its code finished, or the "
                                  "reply was lost); the kernel is idle";
                } else if (cell->reply_status && streq(cell->reply_status, "ok"))
                        status = EXEC_OK;
                else if (cell->reply_status && streq(cell->reply_status, "aborted")) {
                        status = EXEC_KERNEL_ABORTED;
                        if (cell->interrupted || json_array_size(cell->outputs) > 0 || cell->pend_name)
                                snprintf(msg, sizeof msg,
                                         "the kernel answered the cell \"aborted\" after it had started%s; its "
                                         "outputs so far are shown",
                                         cell->interrupted ? " and was interrupted" : "");
                        else
                                snprintf(msg, sizeof msg,
                                         "the kernel aborted the cell without running it, each of the %u times it "
                                         "was sent (a kernel aborts the cells queued behind one that raised)",
                                         cell->aborted_retries + 1);
                        message = msg;
                } else
                        status = EXEC_ERROR;
                cell_answer(cell, status, q->kernel_id, message);
        }
        queue_advance(q);
}

/* ---- Messages from the kernel ---- */

/* A reply whose payload says the cell called exit() (quirks.h): the cell tells its caller; a kernel that is about
 * to end runs no cell of ours again (the next waits for the next kernel, and is not blamed for this one's end). */
static void run_on_exit_asked(ExecQueue *q, ExecCell *cell, const JupyterMsg *msg) {
        int asked = quirks_exit_asked(msg->content);

        if (!asked)
                return;
        if (cell)
                cell->exit_asked = asked;
        if (asked < 0)
                q->ending = true;
        if (q->hooks.exit_asked)
                q->hooks.exit_asked(q->userdata, q->run.msg_id, asked > 0);
}

void handshake_send(ExecQueue *q) {
        if (queue_send(q, CHANNEL_SHELL, "kernel_info_request", json_object(), q->hs_msg_id) < 0)
                q->hs_msg_id[0] = '\0';
}

void exec_queue_on_reply(ExecQueue *q, Channel channel, const JupyterMsg *msg) {
        const char *parent, *status;
        ExecCell *cell;

        if (!q || !msg || !q->conn || channel != CHANNEL_SHELL)
                return;
        parent = jupyter_msg_parent_id(msg);
        kernel_on_reply(q, parent);

        if (q->hs_msg_id[0] && streq(parent, q->hs_msg_id)) {
                /* Each round makes the kernel publish busy/idle; go on until iopub hears one. */
                if (!q->iopub_ready)
                        handshake_send(q);
                queue_advance(q);
                return;
        }
        if (run_taken(q))
                run_mark_drop(q);
        if (run_taken(q) && q->run.barrier_id[0] && streq(parent, q->run.barrier_id)) {
                run_interrupt_now(q);
                return;
        }
        if (run_taken(q) && q->run.probe_id[0] && streq(parent, q->run.probe_id)) {
                q->run.probe_replied = true;
                run_check(q);
                return;
        }
        if (!run_taken(q) || !streq(parent, q->run.msg_id) || !streq(jupyter_msg_type(msg), "execute_reply")) {
                queue_advance(q); /* the gate's reply may have freed the kernel */
                return;
        }

        touch(q);
        status = json_string_value(json_object_get(msg->content, "status")) ?: "error";
        /* The protocol's older word, which tslab still sends. */
        if (streq(status, "abort"))
                status = "aborted";
        {
                json_t *count = json_object_get(msg->content, "execution_count");
                if (json_is_integer(count) && !streq(status, "aborted"))
                        q->execution_count = json_integer_value(count);
        }
        cell = q->run.cell;
        if (cell) {
                json_t *count = json_object_get(msg->content, "execution_count");

                if (json_is_integer(count))
                        cell->execution_count = json_integer_value(count);
                /* IRkernel answers an interrupted cell "aborted" too: that one ran, and stays interrupted. */
                if (streq(status, "aborted") && !cell->timed_out && !cell->interrupted &&
                    cell->aborted_retries < ABORTED_RETRIES && json_array_size(cell->outputs) == 0 &&
                    !cell->pend_name) {
                        /* It never ran: send it again under a new msg_id, after a pause (resend_cb). The old
                         * id's idle is then of no interest; the slot stays taken meanwhile. */
                        cell->aborted_retries++;
                        snprintf(q->run.msg_id, sizeof q->run.msg_id, "%s", RESEND_PENDING);
                        q->run.got_reply = q->run.got_idle = false;
                        q->run.probe_id[0] = '\0';
                        q->run.probe_replied = q->run.probe_idle = false;
                        (void) uv_timer_stop(&q->settle);
                        (void) uv_timer_start(&q->resend, resend_cb, ABORTED_RESEND_MSEC * cell->aborted_retries, 0);
                        return;
                }
                free(cell->reply_status);
                cell->reply_status = strdup(status);
                {
                        uint64_t written;

                        if (chunking_written(msg->content, &written) > 0 && written <= SIZE_MAX) {
                                cell->written_known = true;
                                cell->written = (size_t) written;
                        }
                }
        }
        run_on_exit_asked(q, cell, msg);
        q->run.got_reply = true;
        if (!streq(status, "aborted"))
                q->run.started = true;
        else if (!cell) {
                /* Withdrawn and aborted unrun: ipykernel sends no idle after such a reply. */
                run_finish(q);
                return;
        }
        run_check(q);
}

static bool msg_is_idle(const char *type, const JupyterMsg *msg) {
        return streq(type, "status") &&
               streq(json_string_value(json_object_get(msg->content, "execution_state")) ?: "", "idle");
}

/* An iopub message about our running request. */
static void run_on_iopub(ExecQueue *q, const char *type, const JupyterMsg *msg) {
        ExecCell *cell;

        q->run.iopub_moved = true;
        run_mark_drop(q);
        if (q->run.probe_id[0] && streq(jupyter_msg_parent_id(msg), q->run.probe_id)) {
                if (msg_is_idle(type, msg)) {
                        q->run.probe_idle = true;
                        run_check(q);
                }
                return;
        }
        if (!streq(jupyter_msg_parent_id(msg), q->run.msg_id))
                return;

        if (streq(type, "status")) {
                if (msg_is_idle(type, msg)) {
                        q->run.got_idle = true;
                        run_check(q);
                } else if (q->no_execute_input)
                        run_mark_started(q);
                return;
        }
        run_mark_started(q);
        cell = q->run.cell; /* NULL now if it was withdrawn */
        if (streq(type, "execute_input")) {
                q->run.saw_input = true;
                q->no_execute_input = false;
                json_t *count = json_object_get(msg->content, "execution_count");

                if (json_is_integer(count) && cell)
                        cell->execution_count = json_integer_value(count);
                return;
        }
        if (!cell)
                return; /* abandoned, cancelled or withdrawn: discarded */

        touch(q);
        if (streq(type, "stream"))
                cell_on_stream(cell, msg->content);
        else if (streq(type, "display_data") || streq(type, "execute_result") || streq(type, "update_display_data"))
                cell_on_display(cell, type, msg->content);
        else if (streq(type, "error"))
                cell_on_error(cell, msg->content);
        else if (streq(type, "clear_output"))
                cell_on_clear(cell, msg->content);
}

void exec_queue_on_iopub(ExecQueue *q, const JupyterMsg *msg) {
        const char *type;

        if (!q || !msg || !q->conn)
                return;
        type = jupyter_msg_type(msg);
        kernel_on_iopub(q, type, msg);
        if (!q->iopub_ready) {
                q->iopub_ready = true;
                (void) uv_timer_stop(&q->hs_timer);
        }
        if (run_taken(q))
                run_on_iopub(q, type, msg);
        /* The kernel may have left another client's request, or our own. */
        queue_advance(q);
}

void exec_queue_on_input_request(ExecQueue *q, const JupyterMsg *msg) {
        if (!q || !msg || !run_taken(q) || !q->run.cell || !streq(jupyter_msg_parent_id(msg), q->run.msg_id))
                return;
        touch(q);
        cell_note(q->run.cell, EXEC_NO_INPUT_NOTE);
}

void exec_queue_on_dropped(ExecQueue *q, Channel channel, size_t max_message) {
        if (!q || !q->conn || (channel != CHANNEL_IOPUB && channel != CHANNEL_SHELL))
                return;
        /* The idle of another client's request may be lost (iopub), or the
         * gate's reply that stands in for it (shell): ask, or ask again. */
        if (channel == CHANNEL_SHELL)
                q->kernel.gate_id[0] = '\0';
        if (kernel_busy_other(q))
                kernel_gate(q);
        if (!run_taken(q))
                return;
        if (channel == CHANNEL_IOPUB)
                q->run.drop_pending = max_message;
        /* Its reply or its idle may be among what was lost. */
        run_probe(q);
}

/* The kernel was heard from after iopub was dropped: it is alive, so the
 * drop was a message over the bound (or a broken connection), not its death. */
static void run_mark_drop(ExecQueue *q) {
        ExecCell *cell = q->run.cell;
        char text[256];

        if (!q->run.drop_pending)
                return;
        if (cell && !cell->drop_marked) {
                cell->drop_marked = true;
                snprintf(text, sizeof text,
                         "\n[output dropped: a message of more than %zu bytes from the kernel (or a broken "
                         "connection); what it sent on iopub meanwhile is lost]\n",
                         q->run.drop_pending);
                cell_note(cell, text);
        }
        q->run.drop_pending = 0;
}

/* ---- Deadlines of queued cells ---- */

static void wait_timer_cb(uv_timer_t *t);

/* Arms the timer for the earliest deadline of a queued cell. */
static void queue_arm_wait(ExecQueue *q) {
        usec_t next = USEC_INFINITY, now;

        for (ExecCell *cell = q->head; cell; cell = cell->next)
                if (cell->deadline < next)
                        next = cell->deadline;
        if (next == USEC_INFINITY) {
                (void) uv_timer_stop(&q->wait_timer);
                return;
        }
        now = now_usec(CLOCK_MONOTONIC);
        (void) uv_timer_start(&q->wait_timer, wait_timer_cb,
                              next > now ? (next - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC : 0, 0);
}

static ExecCell *queue_first_expired(ExecQueue *q, usec_t now) {
        for (ExecCell *cell = q->head; cell; cell = cell->next)
                if (cell->deadline <= now)
                        return cell;
        return NULL;
}

/* A queued cell whose timeout passed before it could start is answered. The
 * list is searched anew after each answer: on_done may cancel other cells. */
static void wait_timer_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;
        ExecCell *cell;
        char why[160];

        while ((cell = queue_first_expired(q, now_usec(CLOCK_MONOTONIC)))) {
                const char *silent = kernel_unresponsive(q, "", why, sizeof why);

                queue_unlink(q, cell);
                answer_not_started(q, cell,
                                   !q->conn               ? "the context had no kernel ready"
                                   : silent               ? silent
                                   : kernel_busy_other(q) ? "the kernel was busy with another client's request"
                                                          : "the kernel was busy with an earlier cell");
        }
        queue_arm_wait(q);
}

/* ---- Public ---- */

size_t exec_message_bound(size_t output_limit) {
        const size_t margin = 16 * 1024 * 1024;

        return output_limit > (SIZE_MAX - margin) / 2 ? SIZE_MAX : 2 * output_limit + margin;
}

int exec_queue_new(uv_loop_t *loop, const ExecHooks *hooks, void *userdata, ExecQueue **ret) {
        ExecQueue *q;

        if (!loop || !ret)
                return -EINVAL;
        q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->loop = loop;
        if (hooks)
                q->hooks = *hooks;
        q->userdata = userdata;
        q->execution_count = -1;
        (void) uv_timer_init(loop, &q->timer);
        (void) uv_timer_init(loop, &q->hs_timer);
        (void) uv_timer_init(loop, &q->settle);
        (void) uv_timer_init(loop, &q->wait_timer);
        (void) uv_timer_init(loop, &q->resend);
        (void) uv_timer_init(loop, &q->barrier);
        q->timer.data = q->hs_timer.data = q->settle.data = q->wait_timer.data = q->resend.data = q->barrier.data = q;
        interrupt_watch_init(q);
        q->n_open_handles = 7;
        *ret = q;
        return 0;
}

static void queue_handle_closed(uv_handle_t *h) {
        ExecQueue *q = h->data;

        if (--q->n_open_handles == 0) {
                free(q->kernel_id);
                free(q->kernel.msg_id);
                free(q->died_why);
                free(q->kill_why);
                free(q);
        }
}

void exec_queue_free(ExecQueue *q) {
        static const char msg[] = "the cell was aborted: its context was removed or the supervisor is exiting";
        ExecCell *cell;

        if (!q)
                return;
        /* No more starts, whatever on_done does. */
        q->conn = NULL;
        (void) uv_timer_stop(&q->hs_timer);
        if ((cell = q->died)) {
                q->died = NULL;
                cell_answer(cell, EXEC_ABORTED, NULL, msg);
        }
        if ((cell = q->run.cell)) {
                q->run.cell = NULL;
                cell_answer(cell, EXEC_ABORTED, q->kernel_id, msg);
        }
        run_clear(q);
        while ((cell = q->head)) {
                queue_unlink(q, cell);
                cell_answer(cell, EXEC_ABORTED, NULL, msg);
        }
        uv_close((uv_handle_t *) &q->timer, queue_handle_closed);
        uv_close((uv_handle_t *) &q->hs_timer, queue_handle_closed);
        uv_close((uv_handle_t *) &q->settle, queue_handle_closed);
        uv_close((uv_handle_t *) &q->wait_timer, queue_handle_closed);
        uv_close((uv_handle_t *) &q->resend, queue_handle_closed);
        uv_close((uv_handle_t *) &q->barrier, queue_handle_closed);
        uv_close((uv_handle_t *) &q->kill, queue_handle_closed);
}

int exec_queue_submit(ExecQueue *q, const char *code, const ExecOptions *opt, const ExecSink *sink, void *userdata,
                      ExecCell **ret) {
        ExecCell *cell;
        int r;

        if (!q || !code || !opt || !sink || !sink->on_done)
                return -EINVAL;
        cell = calloc(1, sizeof *cell);
        if (!cell)
                return -ENOMEM;
        cell->q = q;
        cell->code = strdup(code);
        cell->outputs = json_array();
        cell->display_ids = json_array();
        if (!cell->code || !cell->outputs || !cell->display_ids) {
                cell_free(cell);
                return -ENOMEM;
        }
        cell->opt = *opt;
        cell->sink = *sink;
        cell->userdata = userdata;
        cell->execution_count = -1;
        cell->deadline = opt->timeout == USEC_INFINITY ? USEC_INFINITY : deadline_after(opt->timeout);
        touch(q);

        if (queue_can_start(q) && !q->head) {
                r = queue_start(q, cell);
                if (r < 0) {
                        cell_free(cell);
                        return r;
                }
        } else {
                queue_append(q, cell);
                queue_arm_wait(q);
                queue_gate(q);
        }
        if (ret)
                *ret = cell;
        return 0;
}

void exec_cell_cancel(ExecCell *cell) {
        ExecQueue *q;

        if (!cell)
                return;
        q = cell->q;
        if (cell->queued)
                queue_unlink(q, cell);
        else if (q->died == cell) {
                q->died = NULL;
                free(q->died_why);
                q->died_why = NULL;
        } else if (q->run.cell == cell && !q->run.started) {
                /* Another client's request is ahead of it in the kernel: interrupt nothing. */
                run_withdraw(q);
        } else if (q->run.cell == cell) {
                /* The kernel goes on until it answers; its messages are discarded then. */
                q->run.cell = NULL;
                q->run.in_grace = false;
                (void) uv_timer_stop(&q->timer);
                auto_interrupt(q);
        }
        cell_free(cell);
}

bool exec_cell_interrupt(ExecCell *cell) {
        ExecQueue *q;

        if (!cell)
                return false;
        q = cell->q;
        if (q->run.cell != cell || !q->run.started)
                return false;
        cell->interrupted = true;
        q->counters.interrupts++;
        run_interrupt(q);
        return true;
}

bool exec_queue_interrupt(ExecQueue *q) {
        bool other;

        if (!q || !q->conn)
                return false;
        other = kernel_runs_cell(q) && !q->kernel.ours;
        if (!other && !run_taken(q))
                return false;
        q->counters.interrupts++;
        /* Another client's cell ahead of ours draws its own reply. */
        if (other) {
                if (q->hooks.interrupt)
                        q->hooks.interrupt(q->userdata);
                return true;
        }
        if (q->run.cell)
                q->run.cell->interrupted = true;
        run_interrupt(q);
        return true;
}

size_t exec_queue_pending(const ExecQueue *q) {
        return q ? q->n_pending : 0;
}

long long exec_queue_execution_count(const ExecQueue *q) {
        return q ? q->execution_count : -1;
}

usec_t exec_queue_last_activity(const ExecQueue *q) {
        return q ? q->last_activity : 0;
}

void exec_queue_count_written(ExecQueue *q, bool on) {
        if (q)
                q->count_written = on;
}

const ExecCounters *exec_queue_counters(const ExecQueue *q) {
        return &q->counters;
}

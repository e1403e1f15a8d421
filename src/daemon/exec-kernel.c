/* The cell queue and its kernel: attach (the handshake before the first cell), detach, a kernel gone with a cell
 * running, giving up. See exec.h; the family's private parts are in exec-cell.h. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec-cell.h"
#include "util.h"

/* ---- Kernel attach/detach ---- */

static void hs_timer_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;

        if (q->conn && !q->iopub_ready)
                handshake_send(q);
        else
                (void) uv_timer_stop(t);
}

void exec_queue_detach(ExecQueue *q, const char *why) {
        if (!q || !q->conn)
                return;
        q->conn = NULL;
        q->iopub_ready = false;
        q->hs_msg_id[0] = '\0';
        (void) uv_timer_stop(&q->hs_timer);

        if (q->run.cell && !q->died) {
                q->died = q->run.cell;
                free(q->died_why);
                /* NULL: stopped on purpose (give_up), said so when answered. */
                q->died_killed = q->kill_why;
                q->died_why = q->kill_why ? TAKE_PTR(q->kill_why) : why ? strdup(why) : NULL;
        }
        free(q->kill_why);
        q->kill_why = NULL;
        run_clear(q);
        kernel_clear(q);
        q->kernel.gate_id[0] = '\0';
        q->busy = false;
}

/* Answers the cell that was running when the kernel went away. */
static void answer_died(ExecQueue *q, const char *kernel_id, const char *why_now) {
        ExecCell *cell = q->died;
        _cleanup_free_ char *why = TAKE_PTR(q->died_why);
        char msg[512];

        if (!cell)
                return;
        q->died = NULL;
        if (q->died_killed && kernel_id)
                snprintf(msg, sizeof msg, "%s; the context now runs kernel %s", why, kernel_id);
        else if (q->died_killed)
                snprintf(msg, sizeof msg, "%s; the context has no kernel: %s", why, why_now ?: "it gave up");
        else if (kernel_id)
                snprintf(msg, sizeof msg,
                         "the kernel died while running the cell (%s); the context now runs kernel %s",
                         why ?: "it exited", kernel_id);
        else if (why)
                snprintf(msg, sizeof msg, "the kernel died while running the cell (%s); the context has no kernel: %s",
                         why, why_now ?: "it gave up");
        else
                snprintf(msg, sizeof msg, "the kernel was stopped while running the cell: %s", why_now ?: "stopped");
        q->died_killed = false;
        cell_answer(cell, EXEC_DIED, kernel_id, msg);
}

void exec_queue_attach(ExecQueue *q, KernelConn *conn, const char *kernel_id) {
        char *id;

        if (!q || !conn)
                return;
        if (q->conn)
                exec_queue_detach(q, "the kernel was replaced");
        id = strdup(kernel_id ?: "");
        if (!id)
                return;
        free(q->kernel_id);
        q->kernel_id = id;
        q->conn = conn;
        q->iopub_ready = false;
        q->no_execute_input = false;
        q->ending = false;
        kernel_clear(q);
        q->kernel.gate_id[0] = '\0';
        handshake_send(q);
        (void) uv_timer_start(&q->hs_timer, hs_timer_cb, HANDSHAKE_RESEND_MSEC, HANDSHAKE_RESEND_MSEC);

        answer_died(q, q->kernel_id, NULL);
        queue_advance(q);
}

void exec_queue_give_up(ExecQueue *q, const char *why) {
        size_t n;
        char msg[512];

        if (!q)
                return;
        if (q->conn) {
                /* Not detached first: the kernel is being stopped under a running cell. */
                exec_queue_detach(q, NULL);
        }
        /* Cells queued from inside on_done go to the next kernel: answer only those waiting now. */
        n = q->n_pending;
        answer_died(q, NULL, why);
        snprintf(msg, sizeof msg, "the cell did not run: %s", why ?: "the context has no kernel");
        for (; n > 0 && q->head; n--) {
                ExecCell *cell = q->head;

                queue_unlink(q, cell);
                cell_answer(cell, EXEC_ABORTED, NULL, msg);
        }
}

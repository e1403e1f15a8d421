/* The watch on an interrupt of our running cell that does not take: status shows it (exec_queue_interrupted_at),
 * and a cell's kill_after kills the kernel. See exec.h; the family's private parts are in exec-cell.h. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-cell.h"
#include "util.h"

/* The running request was interrupted and the kernel is still on it: neither its reply nor its idle came. */
static bool interrupt_outstanding(const ExecQueue *q) {
        return run_taken(q) && q->run.interrupted_at && !q->run.got_reply && !q->run.got_idle;
}

static void kill_cb(uv_timer_t *t) {
        ExecQueue *q = t->data;
        char d[32], why[256];

        if (!interrupt_outstanding(q) || !q->hooks.kill)
                return;
        snprintf(why, sizeof why,
                 "the cell did not stop within %s of its interrupt, so the kernel was killed and a new one "
                 "started (kill_after): its namespace is gone",
                 format_duration(d, sizeof d, q->run.kill_after));
        /* Set first: the kernel's exit, should the hook see it at once, finds why. */
        free(q->kill_why);
        q->kill_why = strdup(why);
        if (!q->hooks.kill(q->userdata, why)) {
                free(q->kill_why);
                q->kill_why = NULL;
                return;
        }
        q->counters.kills++;
}

void interrupt_watch_init(ExecQueue *q) {
        (void) uv_timer_init(q->loop, &q->kill);
        q->kill.data = q;
}

void interrupt_watch(ExecQueue *q) {
        /* Not before the kernel has started it: a cell that waits to be sent again (the kernel aborted it) gets no
         * SIGINT of its own, and one that starts after being withdrawn is interrupted then (run_mark_started). */
        if (q->run.interrupted_at || !q->run.started)
                return;
        q->run.interrupted_at = now_usec(CLOCK_REALTIME);
        if (q->run.kill_after)
                (void) uv_timer_start(&q->kill, kill_cb, (q->run.kill_after + USEC_PER_MSEC - 1) / USEC_PER_MSEC, 0);
}

usec_t exec_queue_interrupted_at(const ExecQueue *q, usec_t *ret_kill_at) {
        bool on = q && interrupt_outstanding(q);

        if (ret_kill_at)
                *ret_kill_at = on && q->run.kill_after ? q->run.interrupted_at + q->run.kill_after : 0;
        return on ? q->run.interrupted_at : 0;
}

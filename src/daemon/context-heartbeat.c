/* A running kernel's heartbeat: pings on its hb channel, the misses that make it unresponsive, and
 * the restart unresponsive_restart asks for. See context-private.h. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <uv.h>

#include "context-private.h"
#include "log.h"
#include "util.h"

/* ---- Heartbeat ---- */

static void hb_timer_cb(uv_timer_t *t) {
        Context *c = t->data;
        usec_t now = now_usec(CLOCK_MONOTONIC);
        char d[32];

        if (c->state != CONTEXT_READY && c->state != CONTEXT_BUSY && c->state != CONTEXT_UNRESPONSIVE)
                return;
        /* After a freeze every timer fires at once: that is no silence of the kernel. */
        if (c->host->clock_check(c->host->userdata))
                return;
        c->counters.heartbeat_misses += c->hb_outstanding;
        if (c->hb_outstanding && ++c->hb_missed >= c->cfg->heartbeat_misses && c->state != CONTEXT_UNRESPONSIVE) {
                log_warning("%s: kernel %s missed %u heartbeats; unresponsive", c->name, c->st.kernel_id,
                            c->hb_missed);
                c->unresponsive_since = now;
                context_set_state(c, CONTEXT_UNRESPONSIVE);
        }
        if (c->state == CONTEXT_UNRESPONSIVE && c->cfg->unresponsive_restart &&
            now - c->unresponsive_since >= c->cfg->unresponsive_restart) {
                char msg[160];
                snprintf(msg, sizeof msg, "unresponsive for %s; restarted (unresponsive_restart)",
                         format_duration(d, sizeof d, now - c->unresponsive_since));
                log_warning("%s: kernel %s %s", c->name, c->st.kernel_id, msg);
                context_set_error(c, msg);
                context_restart(c);
                /* It answers nothing, so asking it to shut down only costs stop_timeout. */
                if (c->pid > 0) {
                        (void) kill(-c->pid, SIGKILL);
                        c->stop_phase = 2;
                }
                return;
        }
        if (c->conn && kernel_conn_ping(c->conn) >= 0)
                c->hb_outstanding = true;
}

void context_hb_start(Context *c) {
        uint64_t ms = c->cfg->heartbeat_interval / USEC_PER_MSEC ?: 1;

        c->hb_outstanding = false;
        c->hb_missed = 0;
        c->hb_answered_at = now_usec(CLOCK_MONOTONIC);
        uv_timer_start(&c->hb_timer, hb_timer_cb, ms, ms);
}

int context_probe(Context *c, uint64_t *ret_answers) {
        int r;

        if (!c->conn || (c->state != CONTEXT_READY && c->state != CONTEXT_BUSY && c->state != CONTEXT_UNRESPONSIVE))
                return -ESRCH;
        r = kernel_conn_ping(c->conn);
        if (r < 0)
                return r;
        c->hb_outstanding = true;
        *ret_answers = c->hb_answers;
        return 0;
}

uint64_t context_hb_answers(const Context *c) {
        return c->hb_answers;
}

/* What the kernel is busy with, from the iopub status messages of every
 * client (ours and others'), and the busy/idle the context is told: see
 * exec-cell.h. Pure libuv and jupyter.h, like exec.c. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-cell.h"
#include "util.h"

/* ---- Requests of ours ---- */

/* Every request of ours goes out here, and its id is remembered: iopub
 * status messages are told apart by it. */
int queue_send(ExecQueue *q, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]) {
        char id[37];
        int r;

        if (q->hooks.send)
                r = q->hooks.send(q->userdata, channel, msg_type, content, id);
        else
                r = kernel_conn_send(q->conn, channel, msg_type, content, id);
        if (r < 0)
                return r;
        memcpy(q->own_ids[q->n_own++ % OWN_IDS], id, sizeof id);
        if (ret_msg_id)
                memcpy(ret_msg_id, id, sizeof id);
        return r;
}

/* ---- What the kernel is busy with ---- */

void kernel_clear(ExecQueue *q) {
        free(q->kernel.msg_id);
        q->kernel.msg_id = NULL;
        q->kernel.msg_type[0] = '\0';
        q->kernel.ours = false;
}

/* A request of ours the queue still waits on. */
static bool id_is_live(const ExecQueue *q, const char *id) {
        return *id && (streq(id, q->run.msg_id) || streq(id, q->run.probe_id) || streq(id, q->hs_msg_id) ||
                       streq(id, q->kernel.gate_id));
}

static bool id_is_own(const ExecQueue *q, const char *id) {
        if (id_is_live(q, id))
                return true;
        for (size_t i = 0; i < OWN_IDS; i++)
                if (streq(id, q->own_ids[i]))
                        return true;
        return false;
}

bool exec_queue_owns(const ExecQueue *q, const char *msg_id) {
        return q && msg_id && *msg_id && id_is_own(q, msg_id);
}

/* Requests a kernel takes on control only: they run beside the shell (so
 * they hold nothing up), and their idle says nothing about the shell's
 * request. */
static bool type_is_control(const char *type) {
        static const char *const types[] = { "interrupt_request", "shutdown_request", "debug_request",
                                             "abort_request",     "clear_request",    "usage_request" };

        for (size_t i = 0; i < ELEMENTSOF(types); i++)
                if (streq(type, types[i]))
                        return true;
        return false;
}

/* An iopub message of any client: status busy/idle says which request the
 * kernel is on, execute_input the kernel's execution count. */
void kernel_on_iopub(ExecQueue *q, const char *type, const JupyterMsg *msg) {
        const char *parent = jupyter_msg_parent_id(msg);
        const char *state = json_string_value(json_object_get(msg->content, "execution_state")) ?: "";
        const char *ptype = json_string_value(json_object_get(msg->parent_header, "msg_type")) ?: "";
        char *id;

        if (streq(type, "execute_input")) {
                json_t *count = json_object_get(msg->content, "execution_count");

                if (json_is_integer(count))
                        q->execution_count = json_integer_value(count);
                return;
        }
        if (!streq(type, "status"))
                return;
        if (streq(state, "idle") && q->kernel.msg_id && streq(parent, q->kernel.msg_id)) {
                kernel_clear(q);
                return;
        }
        if (!streq(state, "busy") || !*parent || type_is_control(ptype))
                return;
        /* A late busy of a request of ours already answered (iopub lags shell; an
         * execute_request ipykernel aborts unrun gets no idle after it). */
        if (id_is_own(q, parent) && !id_is_live(q, parent))
                return;
        id = strdup(parent);
        if (!id)
                return; /* as if lost: the gate's round trip or a deadline gets the queue out */
        free(q->kernel.msg_id);
        q->kernel.msg_id = id;
        snprintf(q->kernel.msg_type, sizeof q->kernel.msg_type, "%s", ptype);
        q->kernel.ours = id_is_own(q, parent);
        q->kernel.seq++;
        /* Another client's cell: a round trip behind it says when it is over,
         * should its idle never come (a dropped iopub, a request ipykernel
         * aborts unrun), so that status never stays busy for an idle kernel. */
        if (!q->kernel.ours && streq(ptype, "execute_request"))
                kernel_gate(q);
}

/* The reply to a request: the kernel has left it (a request ipykernel
 * answers "aborted" on its own gets no idle at all). */
void kernel_on_reply(ExecQueue *q, const char *parent) {
        if (q->kernel.gate_id[0] && streq(parent, q->kernel.gate_id)) {
                q->kernel.gate_id[0] = '\0';
                /* Shell requests are served in order: the request our cells waited for is over. */
                if (kernel_busy_other(q) && q->kernel.seq == q->kernel.gate_seq)
                        kernel_clear(q);
        } else if (q->kernel.msg_id && streq(parent, q->kernel.msg_id))
                kernel_clear(q);
}

bool kernel_busy_other(const ExecQueue *q) {
        return q->kernel.msg_id && !q->kernel.ours;
}

/* Our cells wait for another client's request: ask the kernel, behind it on
 * shell (handled in order), to say when it has left it, should its idle be
 * lost (a dropped iopub, a request a kernel ends without one). Once per
 * such request. */
void kernel_gate(ExecQueue *q) {
        char id[37];

        if (q->kernel.gate_id[0] && q->kernel.gate_seq == q->kernel.seq)
                return;
        if (queue_send(q, CHANNEL_SHELL, "kernel_info_request", json_object(), id) < 0)
                return;
        memcpy(q->kernel.gate_id, id, sizeof id);
        q->kernel.gate_seq = q->kernel.seq;
}

bool kernel_runs_cell(const ExecQueue *q) {
        return q->kernel.msg_id && streq(q->kernel.msg_type, "execute_request");
}

/* ---- Busy or idle ---- */

/* Tells the context when the kernel starts or stops running a cell, ours
 * or another client's (exec_queue_busy). */
void queue_update_busy(ExecQueue *q) {
        bool busy = q->conn && exec_queue_busy(q);

        if (busy == q->busy)
                return;
        q->busy = busy;
        if (q->hooks.busy)
                q->hooks.busy(q->userdata, busy);
}

bool exec_queue_busy(const ExecQueue *q) {
        return q && (run_taken(q) || kernel_runs_cell(q));
}

const char *exec_queue_running(const ExecQueue *q) {
        if (!q || !q->conn)
                return NULL;
        if (kernel_runs_cell(q))
                return q->kernel.ours ? "ours" : "other";
        return run_taken(q) ? "ours" : NULL;
}

/* What the Jupyter wire protocol's unit tests share (test-jupyter.c, test-jupyter-conn.c,
 * test-jupyter-live.c): the signing keys, and the machinery that records what a KernelConn's
 * callbacks saw and runs the loop until a condition holds, bounded by a safety timer. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "jupyter.h"
#include "macro.h"
#include "util.h"
#include "tap.h"

#define KEY "8f3c1a9e4b7d2f6051e8c3a7d9b2e4f60a1c3e5b7d9f2143658709badcfe1234"
#define OTHER_KEY "0000000000000000000000000000000000000000000000000000000000000001"
#define SAFETY_TIMEOUT_MS 30000

/* ---- KernelConn: shared test machinery. ---- */

typedef struct Seen {
        uv_loop_t *loop;
        uv_timer_t safety;
        bool timed_out;

        unsigned replies[_CHANNEL_MAX];
        Channel reply_channel;
        char reply_type[64];
        char reply_parent[37];
        json_t *reply_content;

        unsigned iopub;
        char iopub_type[64];
        char iopub_parent[37];
        /* iopub "status" messages whose parent is want_parent. */
        char want_parent[37];
        unsigned status_for_want;

        unsigned hb;
        unsigned unreadable[_CHANNEL_MAX]; /* messages on_unreadable reported, per channel */
        unsigned dropped[_CHANNEL_MAX];    /* on_dropped, per channel */

        bool in_call;        /* set around kernel_conn_* calls */
        unsigned reentered;  /* callbacks that ran inside one: must stay 0 */
        bool close_on_reply; /* the reply callback closes its own connection */
        bool closed;
        /* Each kernel_info_reply sends another kernel_info_request until iopub
         * delivers something (see test_conn_live). */
        bool iopub_handshake;
        unsigned handshake_rounds;
} Seen;

static inline void on_reply(KernelConn *c, Channel channel, const JupyterMsg *msg, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->replies[channel]++;
        s->reply_channel = channel;
        snprintf(s->reply_type, sizeof s->reply_type, "%s", jupyter_msg_type(msg));
        snprintf(s->reply_parent, sizeof s->reply_parent, "%s", jupyter_msg_parent_id(msg));
        json_decref(s->reply_content);
        s->reply_content = json_incref(msg->content);
        if (s->close_on_reply) {
                kernel_conn_close(c);
                s->closed = true;
        } else if (s->iopub_handshake && s->iopub == 0 && streq(s->reply_type, "kernel_info_reply") &&
                   kernel_conn_send(c, CHANNEL_SHELL, "kernel_info_request", NULL, NULL) >= 0)
                s->handshake_rounds++;
        uv_stop(s->loop);
}

static inline void on_iopub(KernelConn *c, const JupyterMsg *msg, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->iopub++;
        snprintf(s->iopub_type, sizeof s->iopub_type, "%s", jupyter_msg_type(msg));
        snprintf(s->iopub_parent, sizeof s->iopub_parent, "%s", jupyter_msg_parent_id(msg));
        if (streq(s->iopub_type, "status") && streq(s->iopub_parent, s->want_parent))
                s->status_for_want++;
        uv_stop(s->loop);
}

static inline void on_hb(KernelConn *c, void *userdata) {
        Seen *s = userdata;

        if (s->in_call)
                s->reentered++;
        s->hb++;
        uv_stop(s->loop);
}

static inline void on_unreadable(KernelConn *c, Channel channel, void *userdata) {
        Seen *s = userdata;

        s->unreadable[channel]++;
}

static inline void on_dropped(KernelConn *c, Channel channel, void *userdata) {
        Seen *s = userdata;

        s->dropped[channel]++;
}

_unused_ static const KernelConnCallbacks callbacks = {
        .on_reply = on_reply,
        .on_iopub = on_iopub,
        .on_hb = on_hb,
        .on_unreadable = on_unreadable,
        .on_dropped = on_dropped,
};

static inline void on_safety(uv_timer_t *t) {
        Seen *s = t->data;

        s->timed_out = true;
        uv_stop(s->loop);
}

/* Runs the loop until cond holds; a timer bounds the wait so that a broken
 * implementation fails the test instead of hanging it. */
#define RUN_UNTIL(s, cond)                                                                                            \
        ({                                                                                                            \
                (s)->timed_out = false;                                                                               \
                uv_timer_start(&(s)->safety, on_safety, SAFETY_TIMEOUT_MS, 0);                                        \
                while (!(cond) && !(s)->timed_out)                                                                    \
                        uv_run((s)->loop, UV_RUN_DEFAULT);                                                            \
                uv_timer_stop(&(s)->safety);                                                                          \
                (cond);                                                                                               \
        })

static inline void on_settled(uv_timer_t *t) {
        uv_stop(t->loop);
}

/* Lets the loop run for ms to give wrong callbacks a chance to show. Only
 * used to look for something that must NOT happen: a correct implementation
 * passes whatever the timing. */
static inline void run_for(Seen *s, uint64_t ms) {
        uv_timer_start(&s->safety, on_settled, ms, 0);
        uv_run(s->loop, UV_RUN_DEFAULT);
        uv_timer_stop(&s->safety);
}

static inline void seen_init(Seen *s, uv_loop_t *loop) {
        *s = (Seen){ .loop = loop };
        uv_timer_init(loop, &s->safety);
        s->safety.data = s;
}

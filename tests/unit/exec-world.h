/* The world the cell queue's unit tests share (test-exec.c, test-exec-clients.c, test-exec-live.c):
 * the sinks and hooks that record what the queue did, one loop with a safety timer, output
 * helpers, and a fake send hook with hand-built kernel messages to feed the queue. Each test
 * program includes it once; whatever one of them does not use is marked unused. */
#pragma once

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "chunking.h"
#include "exec.h"
#include "jupyter.h"
#include "macro.h"
#include "util.h"
#include "tap.h"

#define SAFETY_TIMEOUT_MS 60000

/* ---- What the sinks and hooks saw ---- */

typedef struct Done {
        bool done;
        unsigned n_done;
        ExecStatus status;
        long long count;
        char *kernel_id;
        char *message;
        json_t *outputs;  /* a copy of result->outputs */
        json_t *streamed; /* copies of each on_output */
        unsigned order;   /* the value of the global completion counter when done */
} Done;

_unused_ static unsigned completions;

static inline void done_reset(Done *d) {
        free(d->kernel_id);
        free(d->message);
        json_decref(d->outputs);
        json_decref(d->streamed);
        *d = (Done){ .streamed = json_array() };
}

static inline void sink_output(void *userdata, const json_t *output) {
        Done *d = userdata;

        json_array_append_new(d->streamed, json_deep_copy(output));
}

static inline void sink_done(void *userdata, const ExecResult *res) {
        Done *d = userdata;

        d->done = true;
        d->n_done++;
        d->status = res->status;
        d->count = res->execution_count;
        d->kernel_id = res->kernel_id ? strdup(res->kernel_id) : NULL;
        d->message = res->message ? strdup(res->message) : NULL;
        d->outputs = json_deep_copy(res->outputs);
        d->order = ++completions;
}

_unused_ static const ExecSink sink = { sink_output, sink_done };

/* The test's world: one loop, one queue, the current kernel. */
typedef struct World {
        uv_loop_t loop;
        uv_timer_t safety;
        bool timed_out;
        ExecQueue *q;

        pid_t pid; /* the current kernel's, 0 when none */
        KernelConn *conn;
        char info_id[37];
        bool info_replied;

        unsigned interrupts;
        unsigned busy_true, busy_false;
        bool busy;
} World;

_unused_ static World w;

static inline void hook_interrupt(void *userdata) {
        World *x = userdata;

        x->interrupts++;
        if (x->pid > 0)
                (void) kill(-x->pid, SIGINT);
}

static inline void hook_busy(void *userdata, bool busy) {
        World *x = userdata;

        if (busy)
                x->busy_true++;
        else
                x->busy_false++;
        x->busy = busy;
}

_unused_ static const ExecHooks hooks = { hook_interrupt, hook_busy };

static inline void on_reply(KernelConn *c, Channel channel, const JupyterMsg *msg, void *userdata) {
        World *x = userdata;

        if (streq(jupyter_msg_parent_id(msg), x->info_id))
                x->info_replied = true;
        if (x->q)
                exec_queue_on_reply(x->q, channel, msg);
}

static inline void on_iopub(KernelConn *c, const JupyterMsg *msg, void *userdata) {
        World *x = userdata;

        if (x->q)
                exec_queue_on_iopub(x->q, msg);
}

_unused_ static const KernelConnCallbacks conn_callbacks = { .on_reply = on_reply, .on_iopub = on_iopub };

static inline void on_safety(uv_timer_t *t) {
        w.timed_out = true;
}

/* Runs the loop until cond holds, bounded by a safety timer, so that a broken
 * implementation fails the test instead of hanging it. */
#define RUN_UNTIL(cond)                                                                                               \
        ({                                                                                                            \
                w.timed_out = false;                                                                                  \
                uv_timer_start(&w.safety, on_safety, SAFETY_TIMEOUT_MS, 0);                                           \
                while (!(cond) && !w.timed_out)                                                                       \
                        uv_run(&w.loop, UV_RUN_ONCE);                                                                 \
                uv_timer_stop(&w.safety);                                                                             \
                (cond);                                                                                               \
        })

static inline void on_settled(uv_timer_t *t) {
        w.timed_out = true;
}

/* Runs the loop for ms, to give something that must NOT happen a chance to show. */
static inline void run_for(uint64_t ms) {
        w.timed_out = false;
        uv_timer_start(&w.safety, on_settled, ms, 0);
        while (!w.timed_out)
                uv_run(&w.loop, UV_RUN_ONCE);
}

/* ---- Output helpers ---- */

static inline const char *out_type(const json_t *o) {
        return json_string_value(json_object_get(o, "output_type"));
}

static inline const json_t *find_output(const json_t *outputs, const char *type) {
        size_t i;
        const json_t *o;

        json_array_foreach(outputs, i, o) {
                if (out_type(o) && streq(out_type(o), type))
                        return o;
        }
        return NULL;
}

static inline size_t count_outputs(const json_t *outputs, const char *type) {
        size_t i, n = 0;
        const json_t *o;

        json_array_foreach(outputs, i, o) {
                if (out_type(o) && streq(out_type(o), type))
                        n++;
        }
        return n;
}

static inline const char *plain(const json_t *o) {
        return json_string_value(json_object_get(json_object_get(o, "data"), "text/plain"));
}

/* The text of every stream output of that name, concatenated (newly allocated). */
static inline char *stream_text(const json_t *outputs, const char *name) {
        size_t i, len = 0;
        const json_t *o;
        char *s = calloc(1, 1);

        json_array_foreach(outputs, i, o) {
                const char *t = json_string_value(json_object_get(o, "text"));
                size_t n = t ? strlen(t) : 0;
                char *g;

                if (!out_type(o) || !streq(out_type(o), "stream") || !t ||
                    !streq(json_string_value(json_object_get(o, "name")) ?: "", name))
                        continue;
                g = realloc(s, len + n + 1);
                if (!g)
                        break;
                s = g;
                memcpy(s + len, t, n + 1);
                len += n;
        }
        return s;
}

/* stream_text for a single use: valid until the next call. */
static inline const char *stext(const json_t *outputs, const char *name) {
        static char *last;

        free(last);
        last = outputs ? stream_text(outputs, name) : NULL;
        return last ?: "";
}

/* Runs one cell to its end with the given options; d receives the result. */
static inline bool run_cell_opt(const char *code, const ExecOptions *opt, Done *d) {
        int r;

        done_reset(d);
        r = exec_queue_submit(w.q, code, opt, &sink, d, NULL);
        if (r < 0) {
                printf("# submit: %s\n", strerror(-r));
                return false;
        }
        return RUN_UNTIL(d->done);
}

_unused_ static const ExecOptions default_opt = { .timeout = USEC_INFINITY, .output_limit = 10 * 1024 * 1024 };

static inline bool run_cell(const char *code, Done *d) {
        return run_cell_opt(code, &default_opt, d);
}

/* ---- The queue's states, driven by hand-built messages ---- */

typedef struct Sent {
        Channel channel;
        char type[32];
        char id[37];
        char arg[64]; /* content.msg_ids[0] of an abort_request */
        bool counted; /* an execute_request asked for the kernel's count of what it writes (chunking.h) */
} Sent;

_unused_ static Sent sent[256];
_unused_ static unsigned n_sent;
_unused_ static int send_error; /* what the fake send returns when not 0 */
_unused_ static int fake_token; /* its address stands for the KernelConn */

static inline int hook_send(void *userdata, Channel channel, const char *msg_type, json_t *content,
                            char ret_msg_id[37]) {
        Sent *s;

        if (send_error) {
                json_decref(content);
                return send_error;
        }
        s = &sent[n_sent++ % ELEMENTSOF(sent)];
        s->channel = channel;
        snprintf(s->type, sizeof s->type, "%s", msg_type);
        snprintf(s->arg, sizeof s->arg, "%s",
                 json_string_value(json_array_get(json_object_get(content, "msg_ids"), 0)) ?: "");
        s->counted = json_object_get(json_object_get(content, "user_expressions"), CHUNKING_WRITTEN_EXPRESSION);
        json_decref(content);
        uuid_random(s->id);
        if (ret_msg_id)
                memcpy(ret_msg_id, s->id, 37);
        return 0;
}

_unused_ static const ExecHooks fake_hooks = { hook_interrupt, hook_busy, hook_send };

/* The msg_id of the last request of that type sent at or after index since, or NULL. */
static inline const char *sent_since(unsigned since, const char *type) {
        for (unsigned i = n_sent; i > since; i--)
                if (streq(sent[(i - 1) % ELEMENTSOF(sent)].type, type))
                        return sent[(i - 1) % ELEMENTSOF(sent)].id;
        return NULL;
}

static inline void feed(ExecQueue *q, Channel channel, const char *type, const char *parent, json_t *content) {
        JupyterMsg m;

        if (!parent || jupyter_msg_new(type, "kernel-session", content, &m) < 0)
                return;
        json_object_set_new(m.parent_header, "msg_id", json_string(parent));
        if (channel == CHANNEL_IOPUB)
                exec_queue_on_iopub(q, &m);
        else
                exec_queue_on_reply(q, channel, &m);
        jupyter_msg_done(&m);
}

static inline void feed_status(ExecQueue *q, const char *parent, const char *state) {
        feed(q, CHANNEL_IOPUB, "status", parent, json_pack("{s:s}", "execution_state", state));
}

static inline void feed_reply(ExecQueue *q, const char *parent, const char *status) {
        feed(q, CHANNEL_SHELL, "execute_reply", parent,
             json_pack("{s:s, s:i}", "status", status, "execution_count", 9));
}

/* The kernel starts the request: its execute_input. */
static inline void feed_input(ExecQueue *q, const char *parent) {
        feed(q, CHANNEL_IOPUB, "execute_input", parent, json_pack("{s:s, s:i}", "code", "", "execution_count", 9));
}

static inline void feed_info(ExecQueue *q, const char *parent) {
        feed(q, CHANNEL_SHELL, "kernel_info_reply", parent, json_pack("{s:s}", "status", "ok"));
}

static inline void feed_stream(ExecQueue *q, const char *parent, const char *text) {
        feed(q, CHANNEL_IOPUB, "stream", parent, json_pack("{s:s, s:s}", "name", "stdout", "text", text));
}

#define NO_REPLY "[no reply: the kernel sent no reply to the cell"

/* Submits code and returns the msg_id of its execute_request (copied to id). */
static inline bool submit_started(ExecQueue *q, const char *code, const ExecOptions *opt, Done *d, char id[37]) {
        unsigned since = n_sent;
        const char *s;

        done_reset(d);
        if (exec_queue_submit(q, code, opt, &sink, d, NULL) < 0)
                return false;
        s = sent_since(since, "execute_request");
        if (!s)
                return false;
        memcpy(id, s, 37);
        return true;
}

/* Tests of the cell queue: its contract without a kernel, then cells run on
 * real ipykernels through a real KernelConn (outputs, errors, timeouts,
 * cancel, input(), the output limit, matplotlib, a kernel killed mid-cell,
 * give_up and free). */
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
#include <zmq.h>

#include "exec.h"
#include "jupyter.h"
#include "util.h"
#include "ports.h"
#include "tap.h"

#define SAFETY_TIMEOUT_MS 60000
#define MAX_KERNELS 4

static void skip(const char *reason) {
        printf("ok %d # SKIP %s\n", ++tap_n, reason);
}

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

static unsigned completions;

static void done_reset(Done *d) {
        free(d->kernel_id);
        free(d->message);
        json_decref(d->outputs);
        json_decref(d->streamed);
        *d = (Done){ .streamed = json_array() };
}

static void sink_output(void *userdata, const json_t *output) {
        Done *d = userdata;

        json_array_append_new(d->streamed, json_deep_copy(output));
}

static void sink_done(void *userdata, const ExecResult *res) {
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

static const ExecSink sink = { sink_output, sink_done };

/* The test's world: one loop, one queue, the current kernel. */
typedef struct World {
        uv_loop_t loop;
        uv_timer_t safety;
        bool timed_out;
        void *zmq;
        ExecQueue *q;

        pid_t pid; /* the current kernel's, 0 when none */
        KernelConn *conn;
        char info_id[37];
        bool info_replied;

        unsigned interrupts;
        unsigned busy_true, busy_false;
        bool busy;
} World;

static World w;

static void hook_interrupt(void *userdata) {
        World *x = userdata;

        x->interrupts++;
        if (x->pid > 0)
                (void) kill(-x->pid, SIGINT);
}

static void hook_busy(void *userdata, bool busy) {
        World *x = userdata;

        if (busy)
                x->busy_true++;
        else
                x->busy_false++;
        x->busy = busy;
}

static const ExecHooks hooks = { hook_interrupt, hook_busy };

static void on_reply(KernelConn *c, Channel channel, const JupyterMsg *msg, void *userdata) {
        World *x = userdata;

        if (streq(jupyter_msg_parent_id(msg), x->info_id))
                x->info_replied = true;
        if (x->q)
                exec_queue_on_reply(x->q, channel, msg);
}

static void on_iopub(KernelConn *c, const JupyterMsg *msg, void *userdata) {
        World *x = userdata;

        if (x->q)
                exec_queue_on_iopub(x->q, msg);
}

static const KernelConnCallbacks conn_callbacks = { .on_reply = on_reply, .on_iopub = on_iopub };

static void on_safety(uv_timer_t *t) {
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

static void on_settled(uv_timer_t *t) {
        w.timed_out = true;
}

/* Runs the loop for ms, to give something that must NOT happen a chance to show. */
static void run_for(uint64_t ms) {
        w.timed_out = false;
        uv_timer_start(&w.safety, on_settled, ms, 0);
        while (!w.timed_out)
                uv_run(&w.loop, UV_RUN_ONCE);
}

/* ---- Output helpers ---- */

static const char *out_type(const json_t *o) {
        return json_string_value(json_object_get(o, "output_type"));
}

static const json_t *find_output(const json_t *outputs, const char *type) {
        size_t i;
        const json_t *o;

        json_array_foreach(outputs, i, o) {
                if (out_type(o) && streq(out_type(o), type))
                        return o;
        }
        return NULL;
}

static size_t count_outputs(const json_t *outputs, const char *type) {
        size_t i, n = 0;
        const json_t *o;

        json_array_foreach(outputs, i, o) {
                if (out_type(o) && streq(out_type(o), type))
                        n++;
        }
        return n;
}

static const char *plain(const json_t *o) {
        return json_string_value(json_object_get(json_object_get(o, "data"), "text/plain"));
}

/* The text of every stream output of that name, concatenated (newly allocated). */
static char *stream_text(const json_t *outputs, const char *name) {
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
static const char *stext(const json_t *outputs, const char *name) {
        static char *last;

        free(last);
        last = outputs ? stream_text(outputs, name) : NULL;
        return last ?: "";
}

/* Runs one cell to its end with the given options; d receives the result. */
static bool run_cell_opt(const char *code, const ExecOptions *opt, Done *d) {
        int r;

        done_reset(d);
        r = exec_queue_submit(w.q, code, opt, &sink, d, NULL);
        if (r < 0) {
                printf("# submit: %s\n", strerror(-r));
                return false;
        }
        return RUN_UNTIL(d->done);
}

static const ExecOptions default_opt = { .timeout = USEC_INFINITY, .output_limit = 10 * 1024 * 1024 };

static bool run_cell(const char *code, Done *d) {
        return run_cell_opt(code, &default_opt, d);
}

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

/* ---- The queue's states, driven by hand-built messages ---- */

typedef struct Sent {
        Channel channel;
        char type[32];
        char id[37];
        char arg[64]; /* content.msg_ids[0] of an abort_request */
} Sent;

static Sent sent[256];
static unsigned n_sent;
static int send_error; /* what the fake send returns when not 0 */
static int fake_token; /* its address stands for the KernelConn */

static int hook_send(void *userdata, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]) {
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
        json_decref(content);
        uuid_random(s->id);
        if (ret_msg_id)
                memcpy(ret_msg_id, s->id, 37);
        return 0;
}

static const ExecHooks fake_hooks = { hook_interrupt, hook_busy, hook_send };

/* The msg_id of the last request of that type sent at or after index since, or NULL. */
static const char *sent_since(unsigned since, const char *type) {
        for (unsigned i = n_sent; i > since; i--)
                if (streq(sent[(i - 1) % ELEMENTSOF(sent)].type, type))
                        return sent[(i - 1) % ELEMENTSOF(sent)].id;
        return NULL;
}

static void feed(ExecQueue *q, Channel channel, const char *type, const char *parent, json_t *content) {
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

static void feed_status(ExecQueue *q, const char *parent, const char *state) {
        feed(q, CHANNEL_IOPUB, "status", parent, json_pack("{s:s}", "execution_state", state));
}

static void feed_reply(ExecQueue *q, const char *parent, const char *status) {
        feed(q, CHANNEL_SHELL, "execute_reply", parent,
             json_pack("{s:s, s:i}", "status", status, "execution_count", 9));
}

/* The kernel starts the request: its execute_input. */
static void feed_input(ExecQueue *q, const char *parent) {
        feed(q, CHANNEL_IOPUB, "execute_input", parent, json_pack("{s:s, s:i}", "code", "", "execution_count", 9));
}

static void feed_info(ExecQueue *q, const char *parent) {
        feed(q, CHANNEL_SHELL, "kernel_info_reply", parent, json_pack("{s:s}", "status", "ok"));
}

static void feed_stream(ExecQueue *q, const char *parent, const char *text) {
        feed(q, CHANNEL_IOPUB, "stream", parent, json_pack("{s:s, s:s}", "name", "stdout", "text", text));
}

#define NO_REPLY "[no reply: the kernel sent no reply to the cell"

/* Submits code and returns the msg_id of its execute_request (copied to id). */
static bool submit_started(ExecQueue *q, const char *code, const ExecOptions *opt, Done *d, char id[37]) {
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
        ok(strstr(stext(d.outputs, "stderr"), "[output truncated: 1019904 more bytes not kept]") != NULL,
           "empty displays: and how much more came (996 x 1 KiB)");
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

        r = kernel_conn_new(&w.loop, w.zmq, &ci, exec_message_bound(10 * 1024 * 1024), &conn_callbacks, &w, &w.conn);
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
                   "huge print: the last output says how much was cut");
                kept -= strlen(summary);
                streamed -= strlen(summary);
        }
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
        w.zmq = zmq_ctx_new();
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
        is_int(zmq_ctx_term(w.zmq), 0, "live: zmq_ctx_term");
        is_int(uv_loop_close(&w.loop), 0, "live: uv_loop_close, nothing left on the loop");
}

int main(void) {
        atexit(cleanup);
        test_no_kernel();
        test_states();
        test_clients();
        test_live();
        cleanup();
        (void) stext(NULL, NULL);
        return tap_done();
}

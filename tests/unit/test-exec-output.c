/* Tests of a cell's output shaping (exec-output.c) through the queue's send hook, with hand-built kernel
 * messages and no kernel: stream merging, display_data and execute_result, update_display_data by display_id,
 * clear_output with and without wait, errors, the output limit (its marker, a UTF-8 sequence never cut, the
 * count of what was not kept, the first error kept past it) and a kernel's aborted reply. What is kept
 * (ExecResult.outputs) and what is streamed (ExecSink.on_output) are checked apart. */
#include "exec-world.h"
#include "execution.h"

/* The queue of one fake kernel, its handshake done. */
static ExecQueue *world_start(void) {
        ExecQueue *q = NULL;
        unsigned since = n_sent;
        const char *hs;

        if (uv_loop_init(&w.loop) < 0)
                return NULL;
        uv_timer_init(&w.loop, &w.safety);
        w.pid = 0;
        if (exec_queue_new(&w.loop, &fake_hooks, &w, &q) < 0)
                return NULL;
        exec_queue_attach(q, (KernelConn *) &fake_token, "kf");
        hs = sent_since(since, "kernel_info_request");
        if (hs)
                feed_status(q, hs, "busy");
        return q;
}

static void world_end(ExecQueue *q) {
        exec_queue_free(q);
        uv_close((uv_handle_t *) &w.safety, NULL);
        uv_run(&w.loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w.loop), 0, "teardown: uv_loop_close");
}

/* Ends the running cell id: its reply with status, then idle. */
static void finish(ExecQueue *q, const char *id, const char *status) {
        feed_reply(q, id, status);
        feed_status(q, id, "idle");
}

static void feed_named(ExecQueue *q, const char *id, const char *name, const char *text) {
        feed(q, CHANNEL_IOPUB, "stream", id, json_pack("{s:s, s:s}", "name", name, "text", text));
}

/* A display_data (or update_display_data, execute_result) of text/plain text, with display_id when not NULL. */
static void feed_display(ExecQueue *q, const char *id, const char *type, const char *text, const char *display_id) {
        json_t *c = json_pack("{s:{s:s}, s:{}}", "data", "text/plain", text, "metadata");

        if (display_id)
                json_object_set_new(c, "transient", json_pack("{s:s}", "display_id", display_id));
        if (streq(type, "execute_result"))
                json_object_set_new(c, "execution_count", json_integer(5));
        feed(q, CHANNEL_IOPUB, type, id, c);
}

static void feed_clear(ExecQueue *q, const char *id, bool wait) {
        feed(q, CHANNEL_IOPUB, "clear_output", id, json_pack("{s:b}", "wait", wait));
}

static void feed_error(ExecQueue *q, const char *id, const char *ename) {
        feed(q, CHANNEL_IOPUB, "error", id,
             json_pack("{s:s, s:s, s:[s, s]}", "ename", ename, "evalue", "boom", "traceback", "line 1", "line 2"));
}

/* The output at index i, its type and (for a stream) name and text, as "stream:stdout:ab". */
static const char *shape(const json_t *outputs, size_t i) {
        static char buf[256];
        const json_t *o = json_array_get(outputs, i);
        const char *t = out_type(o);

        if (!o)
                return "(none)";
        if (t && streq(t, "stream"))
                snprintf(buf, sizeof buf, "stream:%s:%s", json_string_value(json_object_get(o, "name")) ?: "?",
                         json_string_value(json_object_get(o, "text")) ?: "?");
        else if (t && streq(t, "clear_output"))
                snprintf(buf, sizeof buf, "clear_output:%s",
                         json_is_true(json_object_get(o, "wait")) ? "wait" : "now");
        else
                snprintf(buf, sizeof buf, "%s:%s", t ?: "?", plain(o) ?: "");
        return buf;
}

static void test_streams(ExecQueue *q, Done *d) {
        char id[37];

        if (!ok(submit_started(q, "streams", &default_opt, d, id), "streams: started"))
                return;
        feed_named(q, id, "stdout", "a");
        feed_named(q, id, "stdout", "b");
        feed_named(q, id, "stderr", "c");
        feed_named(q, id, "stdout", "d");
        finish(q, id, "ok");
        ok(d->done && d->status == EXEC_OK, "streams: ok");
        is_int(json_array_size(d->outputs), 3, "streams: a run of one stream's pieces is kept as one output");
        is_str(shape(d->outputs, 0), "stream:stdout:ab", "streams: stdout's two pieces merged");
        is_str(shape(d->outputs, 1), "stream:stderr:c", "streams: stderr apart");
        is_str(shape(d->outputs, 2), "stream:stdout:d", "streams: stdout again, a new output");
        is_int(json_array_size(d->streamed), 4, "streams: every piece is streamed as it comes");
        is_str(shape(d->streamed, 1), "stream:stdout:b", "streams: the second piece streamed alone");
}

static void test_displays(ExecQueue *q, Done *d) {
        char id[37];

        if (!ok(submit_started(q, "displays", &default_opt, d, id), "displays: started"))
                return;
        feed_named(q, id, "stdout", "x");
        feed_display(q, id, "display_data", "one", "d1");
        feed_named(q, id, "stdout", "y");
        feed_display(q, id, "display_data", "two", NULL);
        feed_display(q, id, "update_display_data", "ONE", "d1");
        feed_display(q, id, "update_display_data", "none", NULL);
        feed_display(q, id, "update_display_data", "nobody", "d-unknown");
        feed_display(q, id, "execute_result", "42", NULL);
        finish(q, id, "ok");
        ok(d->done && d->status == EXEC_OK, "displays: ok");
        is_int(json_array_size(d->outputs), 5, "displays: an update adds no output");
        is_str(shape(d->outputs, 0), "stream:stdout:x", "displays: a display ends the stream's output before it");
        is_str(shape(d->outputs, 1), "display_data:ONE", "displays: update_display_data replaced display d1's data");
        is_str(shape(d->outputs, 2), "stream:stdout:y", "displays: the stream after it, its own output");
        is_str(shape(d->outputs, 3), "display_data:two", "displays: a display without an id is kept as it came");
        is_str(shape(d->outputs, 4), "execute_result:42", "displays: the execute_result");
        is_int(json_integer_value(json_object_get(json_array_get(d->outputs, 4), "execution_count")), 5,
               "displays: the execute_result keeps its execution_count");
        ok(json_object_get(json_array_get(d->outputs, 1), "transient") == NULL,
           "displays: a kept display has no transient (nbformat has none)");
        /* Streamed: x, one, y, two, the update of d1, the update of an unknown id, 42; not the update without id. */
        is_int(json_array_size(d->streamed), 7, "displays: an update without display_id is not streamed");
        const json_t *upd = json_array_get(d->streamed, 4);
        is_str(shape(d->streamed, 4), "update_display_data:ONE", "displays: the update is streamed as such");
        is_str(json_string_value(json_object_get(json_object_get(upd, "transient"), "display_id")), "d1",
               "displays: a streamed update names its display_id (transient)");
}

static void test_clear(ExecQueue *q, Done *d) {
        char id[37];

        if (!ok(submit_started(q, "clear", &default_opt, d, id), "clear: started"))
                return;
        feed_named(q, id, "stdout", "old");
        feed_display(q, id, "display_data", "gone", NULL);
        feed_clear(q, id, false);
        ok(json_array_size(d->streamed) == 3 && streq(shape(d->streamed, 2), "clear_output:now"),
           "clear: clear_output is streamed (%s)", shape(d->streamed, 2));
        feed_named(q, id, "stdout", "new");
        finish(q, id, "ok");
        is_int(json_array_size(d->outputs), 1, "clear: clear_output(wait=False) drops what came before at once");
        is_str(shape(d->outputs, 0), "stream:stdout:new", "clear: what came after is kept");

        if (!ok(submit_started(q, "clear wait", &default_opt, d, id), "clear wait: started"))
                return;
        feed_named(q, id, "stdout", "frame 1");
        feed_clear(q, id, true);
        feed_named(q, id, "stdout", "frame 2");
        feed_clear(q, id, true);
        finish(q, id, "ok");
        is_int(json_array_size(d->outputs), 1, "clear wait: clear_output(wait=True) drops only once more comes");
        is_str(shape(d->outputs, 0), "stream:stdout:frame 2", "clear wait: the last frame stays, nothing came after");
        is_str(shape(d->streamed, 1), "clear_output:wait", "clear wait: streamed with wait");

        if (!ok(submit_started(q, "clear wait display", &default_opt, d, id), "clear wait display: started"))
                return;
        feed_display(q, id, "display_data", "bar 1", "bar");
        feed_clear(q, id, true);
        feed_display(q, id, "update_display_data", "bar 2", "bar");
        finish(q, id, "ok");
        is_int(json_array_size(d->outputs), 1, "clear wait display: an update is no new output (the clear waits)");
        is_str(shape(d->outputs, 0), "display_data:bar 2", "clear wait display: the update reached the display");
}

static void test_errors(ExecQueue *q, Done *d) {
        char id[37];

        if (!ok(submit_started(q, "error", &default_opt, d, id), "error: started"))
                return;
        feed_named(q, id, "stdout", "before");
        feed_error(q, id, "ZeroDivisionError");
        finish(q, id, "error");
        ok(d->done && d->status == EXEC_ERROR, "error: the reply's status error is EXEC_ERROR");
        is_int(json_array_size(d->outputs), 2, "error: the stream, then the error");
        const json_t *e = json_array_get(d->outputs, 1);
        is_str(out_type(e), "error", "error: an error output");
        is_str(json_string_value(json_object_get(e, "ename")), "ZeroDivisionError", "error: its ename");
        is_str(json_string_value(json_object_get(e, "evalue")), "boom", "error: its evalue");
        is_int(json_array_size(json_object_get(e, "traceback")), 2, "error: its traceback lines");
}

static void test_limit(ExecQueue *q, Done *d) {
        ExecOptions opt = default_opt;
        char id[37];

        opt.output_limit = 10;
        if (!ok(submit_started(q, "limit", &opt, d, id), "limit: started"))
                return;
        feed_named(q, id, "stdout", "0123456789ABCDEF");
        feed_named(q, id, "stdout", "more");
        feed_display(q, id, "display_data", "hidden", NULL);
        feed_clear(q, id, false);
        finish(q, id, "ok");
        ok(d->done && d->status == EXEC_OK, "limit: ok");
        const char *out = stext(d->outputs, "stdout");
        is_str(out, "0123456789", "limit: the first output_limit bytes are kept");
        const char *err = stext(d->outputs, "stderr");
        ok(strstr(err, "[output truncated: limit of 10 bytes reached]") != NULL, "limit: the marker (%s)", err);
        /* 6 + 4 bytes of text, and the display: its 6 bytes and the 1 KiB every kept output counts (OUTPUT_COST).
         * "at least": the reply carries no count of what the kernel wrote, and a display was cut. */
        ok(strstr(err, "[output truncated: at least 1040 more bytes not kept]") != NULL,
           "limit: the count of what was cut (%s)", err);
        is_int(count_outputs(d->outputs, "display_data"), 0, "limit: nothing is kept after the marker");
        ok(!find_output(d->streamed, "clear_output"), "limit: a clear_output after the marker is not streamed");
        {
                /* What is streamed is what an execution numbers (handlers-cells.c feeds on_output to it): the
                 * cut's marker and the count of what was not kept are numbered outputs like any other. */
                ExecutionStore *s = NULL;
                Execution *e = NULL;
                const json_t *o;
                size_t i;
                char *all = NULL;

                execution_store_new(1 << 20, &s);
                execution_new(s, "a", 0, 32, USEC_INFINITY, 0, &e);
                json_array_foreach(d->streamed, i, o) {
                        execution_output(e, o);
                }
                for (uint64_t k = 0; k < execution_n_outputs(e); k++) {
                        char *next = NULL;
                        if (asprintf(&next, "%s%llu:%s|", all ?: "", (unsigned long long) k,
                                     json_string_value(json_object_get(execution_get_output(e, k), "text")) ?: "?") <
                            0)
                                abort();
                        free(all);
                        all = next;
                }
                is_str(all,
                       "0:0123456789|1:\n[output truncated: limit of 10 bytes reached]\n|2:[output truncated: at "
                       "least "
                       "1040 more bytes not kept]\n|",
                       "limit: the kept text, the marker and the count of what was cut are outputs 0, 1 and 2");
                free(all);
                execution_store_free(s);
        }

        opt.output_limit = 10;
        if (!ok(submit_started(q, "utf-8", &opt, d, id), "utf-8: started"))
                return;
        feed_named(q, id, "stdout", "123456789\xc3\xa9");
        finish(q, id, "ok");
        is_str(stext(d->outputs, "stdout"), "123456789", "utf-8: a sequence that would cross the limit is cut whole");

        if (!ok(submit_started(q, "error past the limit", &opt, d, id), "error past the limit: started"))
                return;
        feed_named(q, id, "stdout", "0123456789xyz");
        feed_error(q, id, "ValueError");
        feed_error(q, id, "TypeError");
        finish(q, id, "error");
        is_int(count_outputs(d->outputs, "error"), 1, "error past the limit: the first error is kept, once");
        is_str(json_string_value(json_object_get(find_output(d->outputs, "error"), "ename")), "ValueError",
               "error past the limit: the cell's own error");
}

/* A kernel that aborts a cell it never ran (its queue was aborted after an error): sent again under a new
 * msg_id, three times, each after a pause (tslab aborts what reaches it within 200 ms of an error); the fourth
 * aborted reply ends it, EXEC_KERNEL_ABORTED. One that printed before is not sent again. */
static void test_aborted(ExecQueue *q, Done *d) {
        char id[37];
        unsigned since;

        if (!ok(submit_started(q, "aborted", &default_opt, d, id), "aborted: started"))
                return;
        for (int i = 1; i <= 3; i++) {
                since = n_sent;
                finish(q, id, "aborted");
                ok(!sent_since(since, "execute_request"), "aborted: not sent again at once (%d)", i);
                RUN_UNTIL(sent_since(since, "execute_request") != NULL);
                const char *again = sent_since(since, "execute_request");
                if (!ok(!d->done && again && !streq(again, id), "aborted: sent again under a new msg_id (%d)", i))
                        return;
                memcpy(id, again, 37);
        }
        since = n_sent;
        finish(q, id, "aborted");
        ok(!sent_since(since, "execute_request"), "aborted: not a fourth time");
        ok(d->done && d->status == EXEC_KERNEL_ABORTED, "aborted: then EXEC_KERNEL_ABORTED (%s)",
           d->done ? exec_status_to_string(d->status) : "not done");
        ok(d->message && strstr(d->message, "aborted the cell without running it"), "aborted: says so (%s)",
           d->message ?: "(null)");

        if (!ok(submit_started(q, "aborted after output", &default_opt, d, id), "aborted after output: started"))
                return;
        feed_named(q, id, "stdout", "ran");
        since = n_sent;
        finish(q, id, "aborted");
        ok(!sent_since(since, "execute_request"), "aborted after output: a cell that printed is not sent again");
        ok(d->done && d->status == EXEC_KERNEL_ABORTED, "aborted after output: EXEC_KERNEL_ABORTED");
        ok(d->message && strstr(d->message, "after it had started"), "aborted after output: says it had started (%s)",
           d->message ?: "(null)");
        is_str(stext(d->outputs, "stdout"), "ran", "aborted after output: its output is kept");
}

int main(void) {
        ExecQueue *q = world_start();
        Done d = { 0 };

        if (!ok(q != NULL, "a queue with a send hook, its handshake done"))
                return tap_done();
        test_streams(q, &d);
        test_displays(q, &d);
        test_clear(q, &d);
        test_errors(q, &d);
        test_limit(q, &d);
        test_aborted(q, &d);
        world_end(q);
        done_reset(&d);
        json_decref(d.streamed);
        (void) stext(NULL, NULL);
        return tap_done();
}

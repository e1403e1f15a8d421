/* Tests of executions (execution.c) with hand-built outputs and no kernel: the numbering, resumption from any
 * number giving exactly the rest, watchers, and the bounds by count, by time and by memory (a running execution
 * never loses anything). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "execution.h"
#include "tap.h"
#include "util.h"

#define SEC USEC_PER_SEC

static json_t *stream(const char *text) {
        return json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", "stdout", "text", text);
}

static void add_stream(Execution *e, const char *text) {
        json_auto_t *o = stream(text);

        (void) execution_output(e, o);
}

/* The text of the outputs from seq on, concatenated (a cut marker or a display as "<type>"). */
static char *read_from(const Execution *e, uint64_t from) {
        size_t alloc = 4096, len = 0;
        char *buf = calloc(1, alloc);

        for (uint64_t i = from; i < execution_n_outputs(e); i++) {
                const json_t *o = execution_get_output(e, i);
                const char *t = json_string_value(json_object_get(o, "text"));
                char piece[256];

                snprintf(piece, sizeof piece, "%s", t ?: json_string_value(json_object_get(o, "output_type")) ?: "?");
                if (len + strlen(piece) + 1 > alloc)
                        buf = realloc(buf, alloc *= 2);
                memcpy(buf + len, piece, strlen(piece) + 1);
                len += strlen(piece);
        }
        return buf;
}

typedef struct Seen {
        uint64_t seqs[64];
        size_t n;
        unsigned ends;
        bool unwatch_at_2;
        ExecutionWatch *w;
} Seen;

static void seen_output(void *userdata, Execution *e, uint64_t seq, const json_t *output) {
        Seen *s = userdata;

        (void) e;
        (void) output;
        if (s->n < 64)
                s->seqs[s->n++] = seq;
        if (s->unwatch_at_2 && s->n == 2) {
                execution_unwatch(s->w);
                s->w = NULL;
        }
}

static void seen_end(void *userdata, Execution *e) {
        Seen *s = userdata;

        (void) e;
        s->ends++;
        s->w = NULL;
}

static const ExecutionWatcher seen_watcher = { .on_output = seen_output, .on_end = seen_end };

static void test_numbering(void) {
        ExecutionStore *s = NULL;
        Execution *e = NULL;
        char *all, *a, *b;
        json_auto_t *cut = NULL, *disp = NULL, *upd = NULL, *clr = NULL;

        is_int(execution_store_new(64 * 1024 * 1024, &s), 0, "store: new");
        is_int(execution_new(s, "a", 1000, 32, 3600 * SEC, 100 * SEC, &e), 0, "numbering: new execution");
        is_str(execution_state_to_string(execution_state(e)), "queued", "numbering: a new execution is queued");
        ok(strlen(execution_id(e)) == 36 && execution_id(e)[14] == '4', "numbering: the id is a v4 UUID (%s)",
           execution_id(e));
        is_int(execution_start(e, "k1", 101 * SEC), 0, "numbering: start");
        is_str(execution_state_to_string(execution_state(e)), "running", "numbering: started is running");

        /* Every output the cell streams is one number: stream chunks apart (never merged), a display, its
         * update, a clear_output, and the cut marker of output_limit. */
        add_stream(e, "a");
        add_stream(e, "b");
        disp = json_pack("{s:s, s:{s:s}}", "output_type", "display_data", "data", "text/plain", "x");
        upd = json_pack("{s:s, s:{s:s}}", "output_type", "update_display_data", "data", "text/plain", "y");
        clr = json_pack("{s:s, s:b}", "output_type", "clear_output", "wait", 0);
        cut = json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", "stderr", "text",
                        "[output truncated: limit of 10 bytes reached]");
        execution_output(e, disp);
        execution_output(e, upd);
        execution_output(e, clr);
        add_stream(e, "c");
        execution_output(e, cut);
        is_int(execution_n_outputs(e), 7, "numbering: seven outputs, seven numbers (0..6)");
        is_str(json_string_value(json_object_get(execution_get_output(e, 3), "output_type")), "update_display_data",
               "numbering: the update is its own number (3)");
        is_str(json_string_value(json_object_get(execution_get_output(e, 6), "text")),
               "[output truncated: limit of 10 bytes reached]", "numbering: the cut is number 6, like any other");
        ok(execution_get_output(e, 7) == NULL, "numbering: no output 7");

        /* Resumption: from every k, exactly what one full read gives from k on; the pieces concatenated make the
         * whole. */
        all = read_from(e, 0);
        is_str(all, "abdisplay_dataupdate_display_dataclear_outputc[output truncated: limit of 10 bytes reached]",
               "resumption: one full read");
        {
                bool every = true;

                for (uint64_t k = 0; k <= execution_n_outputs(e); k++) {
                        a = read_from(e, 0);
                        b = read_from(e, k);
                        /* what was read before k, then from k */
                        char *before = strndup(a, strlen(a) - strlen(b));
                        char *joined = NULL;

                        if (asprintf(&joined, "%s%s", before, b) < 0 || !streq(joined, all) || strlen(b) > strlen(a))
                                every = false;
                        free(before);
                        free(joined);
                        free(a);
                        free(b);
                }
                ok(every, "resumption: reading from any k gives exactly the rest of the full read");
        }
        {
                /* Three pieces while it runs: 0..1, then 2..4, then the rest. */
                char *p1 = read_from(e, 0), *p2, *p3, *joined = NULL;

                p1[2] = '\0'; /* "ab": outputs 0 and 1 */
                p2 = read_from(e, 2);
                p3 = read_from(e, 5);
                p2[strlen(p2) - strlen(p3)] = '\0';
                if (asprintf(&joined, "%s%s%s", p1, p2, p3) < 0)
                        joined = NULL;
                is_str(joined, all, "resumption: pieces 0-1, 2-4, 5- concatenate to the full read");
                free(p1);
                free(p2);
                free(p3);
                free(joined);
        }
        free(all);
        execution_store_free(s);
}

static void test_watchers(void) {
        ExecutionStore *s = NULL;
        Execution *e = NULL;
        Seen one = {}, two = { .unwatch_at_2 = true };
        json_t *result;
        bool is_error = true;
        const char *msg = "x";

        execution_store_new(1 << 20, &s);
        execution_new(s, "a", 1000, 32, 3600 * SEC, 0, &e);
        execution_start(e, NULL, 0);
        add_stream(e, "before");
        is_int(execution_watch(e, &seen_watcher, &one, &one.w), 0, "watchers: watch a running execution");
        is_int(execution_watch(e, &seen_watcher, &two, &two.w), 0, "watchers: a second watcher");
        add_stream(e, "1");
        add_stream(e, "2");
        add_stream(e, "3");
        is_int(one.n, 3, "watchers: the first gets each new output, not the one before it watched");
        ok(one.seqs[0] == 1 && one.seqs[1] == 2 && one.seqs[2] == 3, "watchers: with its number (1, 2, 3)");
        is_int(two.n, 2, "watchers: one that unwatched itself in its callback gets no more");
        result = json_pack("{s:s}", "status", "ok");
        is_int(execution_end(e, EXECUTION_OK, 4, "k", result, false, NULL, 10 * SEC), 0, "watchers: end");
        is_int(one.ends, 1, "watchers: the end reaches the watcher once");
        is_int(two.ends, 0, "watchers: not one that left");
        ok(execution_result(e, &is_error, &msg) != NULL && !is_error && msg == NULL,
           "watchers: the result is kept, not an error");
        {
                json_auto_t *late = stream("late");
                is_int(execution_output(e, late), -EINVAL, "watchers: no output after the end");
        }
        {
                ExecutionWatch *w = NULL;
                is_int(execution_watch(e, &seen_watcher, &one, &w), -EINVAL,
                       "watchers: an ended execution cannot be watched");
        }
        is_int(execution_end(e, EXECUTION_ERROR, 4, "k", json_object(), false, NULL, 11 * SEC), -EINVAL,
               "watchers: it ends once");
        execution_store_free(s);
}

/* Ends e with one output of n bytes. */
static Execution *finished(ExecutionStore *s, const char *ctx, size_t n, unsigned keep, usec_t ttl, usec_t end) {
        Execution *e = NULL;
        char *text = malloc(n + 1);

        memset(text, 'x', n);
        text[n] = '\0';
        execution_new(s, ctx, 1000, keep, ttl, end - SEC, &e);
        execution_start(e, NULL, end - SEC);
        add_stream(e, text);
        free(text);
        execution_end(e, EXECUTION_OK, 1, NULL, json_pack("{s:s, s:[]}", "status", "ok", "outputs"), false, NULL, end);
        return e;
}

static void test_bounds(void) {
        ExecutionStore *s = NULL;
        Execution *e, *first, *run = NULL;
        char id_first[37], id_b[37];

        /* By count: the last 3 of context a, whatever b has. */
        execution_store_new(64 << 20, &s);
        first = finished(s, "a", 10, 3, 3600 * SEC, 10 * SEC);
        snprintf(id_first, sizeof id_first, "%s", execution_id(first));
        e = finished(s, "b", 10, 3, 3600 * SEC, 11 * SEC);
        snprintf(id_b, sizeof id_b, "%s", execution_id(e));
        finished(s, "a", 10, 3, 3600 * SEC, 12 * SEC);
        finished(s, "a", 10, 3, 3600 * SEC, 13 * SEC);
        ok(execution_find(s, id_first) != NULL, "count: three of a are kept");
        finished(s, "a", 10, 3, 3600 * SEC, 14 * SEC);
        ok(execution_find(s, id_first) == NULL, "count: the fourth ended of a drops the one that ended first");
        ok(execution_find(s, id_b) != NULL, "count: b's is not a's to drop");
        {
                Execution **list = NULL;
                size_t n = 0;
                execution_store_list(s, &list, &n);
                is_int(n, 4, "count: three of a and one of b are listed");
                free(list);
        }

        /* By time: at ended + ttl it is gone, a running one stays. */
        execution_new(s, "a", 1000, 3, 5 * SEC, 0, &run);
        execution_start(run, NULL, 0);
        e = finished(s, "c", 10, 3, 5 * SEC, 100 * SEC);
        snprintf(id_b, sizeof id_b, "%s", execution_id(e));
        execution_store_expire(s, 104 * SEC);
        ok(execution_find(s, id_b) != NULL, "ttl: kept before ended + ttl");
        execution_store_expire(s, 105 * SEC);
        ok(execution_find(s, id_b) == NULL, "ttl: gone at ended + ttl");
        ok(execution_find(s, execution_id(run)) != NULL, "ttl: a running execution is never expired");
        execution_store_free(s);

        /* By memory: the oldest ended lose their outputs first; the record stays and says so. */
        execution_store_new(300 * 1024, &s);
        execution_new(s, "a", 1000, 32, 3600 * SEC, 0, &run);
        execution_start(run, NULL, 0);
        for (int i = 0; i < 5; i++) {
                char big[2000];
                memset(big, 'r', sizeof big - 1);
                big[sizeof big - 1] = '\0';
                for (int k = 0; k < 100; k++)
                        add_stream(run, big); /* 5 * 100 * 2 KB: the running one alone is over the bound */
        }
        first = finished(s, "a", 100 * 1024, 32, 3600 * SEC, 10 * SEC);
        ok(execution_outputs_dropped(first), "memory: over the bound, an ended execution loses its outputs");
        ok(!execution_outputs_dropped(run) && execution_get_output(run, 499) != NULL,
           "memory: a running one loses nothing, even over the bound");
        ok(execution_get_output(first, 0) == NULL && execution_n_outputs(first) == 1,
           "memory: the dropped record stays and still counts its outputs");
        is_int(json_array_size(json_object_get(execution_result(first, NULL, NULL), "outputs")), 0,
               "memory: its result's outputs are dropped too");
        {
                ReplyExecution r;
                execution_reply(first, &r);
                ok(r.outputs_dropped && r.outputs == 1, "memory: the record says so");
        }
        execution_end(run, EXECUTION_OK, 1, NULL, json_object(), false, NULL, 20 * SEC);
        ok(execution_outputs_dropped(run), "memory: once it ended, the big one is dropped to fit");
        ok(execution_store_bytes(s) <= 300 * 1024, "memory: then the store is within its bound (%zu bytes)",
           execution_store_bytes(s));
        execution_store_free(s);

        /* The oldest by end time goes first, and only as many as needed. */
        execution_store_new(250 * 1024, &s);
        Execution *o1 = finished(s, "a", 100 * 1024, 32, 3600 * SEC, 10 * SEC);
        Execution *o2 = finished(s, "a", 100 * 1024, 32, 3600 * SEC, 11 * SEC);
        ok(!execution_outputs_dropped(o1) && !execution_outputs_dropped(o2), "memory: two fit");
        Execution *o3 = finished(s, "a", 100 * 1024, 32, 3600 * SEC, 12 * SEC);
        ok(execution_outputs_dropped(o1) && !execution_outputs_dropped(o2) && !execution_outputs_dropped(o3),
           "memory: the third drops the first only");
        execution_store_set_memory(s, 150 * 1024);
        ok(execution_outputs_dropped(o2) && !execution_outputs_dropped(o3),
           "memory: a smaller bound (reload) drops the next oldest at once");
        execution_store_free(s);
}

int main(void) {
        test_numbering();
        test_watchers();
        test_bounds();
        return tap_done();
}

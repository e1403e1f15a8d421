/* Executions and their kept outputs: see execution.h. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "execution.h"
#include "util.h"

/* What a value costs beyond its text: jansson's struct, the allocator's header, a hashtable slot. */
#define JSON_VALUE_OVERHEAD 48
/* What a record costs beyond its outputs (counted against the bound too, so that the bound holds with many
 * records that kept little). */
#define EXECUTION_OVERHEAD 512

struct ExecutionWatch {
        ExecutionWatch *next;
        Execution *e;
        ExecutionWatcher watcher;
        void *userdata;
};

struct Execution {
        ExecutionStore *store;
        Execution *prev, *next; /* the store's list, oldest submitted first */
        char id[37];
        char *context;
        uid_t uid;
        unsigned keep;
        usec_t ttl;

        ExecutionState state;
        char *kernel_id;
        long long execution_count;
        usec_t submitted, started, ended;

        json_t *outputs; /* kept, numbered by index; emptied when dropped */
        uint64_t n_outputs;
        bool dropped;
        json_t *result;
        bool result_is_error;
        char *message;
        size_t bytes; /* counted in the store's */

        ExecutionWatch *watches;
        void *owner;
        /* In the store's list of ended executions that keep their outputs, in the order they ended. */
        Execution *kprev, *knext;
        bool keeping;
};

struct ExecutionStore {
        Execution *head, *tail;
        Execution *khead, *ktail; /* ended and keeping their outputs, the first ended first */
        size_t n;
        size_t bytes, memory;
};

static const char *const state_names[_EXECUTION_STATE_MAX] = {
        [EXECUTION_QUEUED] = "queued",
        [EXECUTION_RUNNING] = "running",
        [EXECUTION_OK] = "ok",
        [EXECUTION_ERROR] = "error",
        [EXECUTION_ABORTED] = "aborted",
        [EXECUTION_TIMEOUT] = "timeout",
        [EXECUTION_INTERRUPTED] = "interrupted",
        [EXECUTION_NOT_STARTED] = "not_started",
        [EXECUTION_LOST] = "lost",
};

const char *execution_state_to_string(ExecutionState s) {
        return (unsigned) s < _EXECUTION_STATE_MAX ? state_names[s] : NULL;
}

size_t execution_json_size(const json_t *j) {
        size_t n = JSON_VALUE_OVERHEAD, i;
        const char *key;
        json_t *v;

        switch (json_typeof(j)) {
        case JSON_STRING:
                return n + json_string_length(j);
        case JSON_ARRAY:
                json_array_foreach((json_t *) j, i, v) {
                        n += execution_json_size(v);
                }
                return n;
        case JSON_OBJECT:
                json_object_foreach((json_t *) j, key, v) {
                        n += strlen(key) + execution_json_size(v);
                }
                return n;
        default:
                return n;
        }
}

/* ---- Accounting ---- */

static void account(Execution *e, size_t add) {
        e->bytes += add;
        e->store->bytes += add;
}

static void keeping_unlink(Execution *e) {
        ExecutionStore *s = e->store;

        if (!e->keeping)
                return;
        if (e->kprev)
                e->kprev->knext = e->knext;
        else
                s->khead = e->knext;
        if (e->knext)
                e->knext->kprev = e->kprev;
        else
                s->ktail = e->kprev;
        e->kprev = e->knext = NULL;
        e->keeping = false;
}

static void keeping_append(Execution *e) {
        ExecutionStore *s = e->store;

        e->kprev = s->ktail;
        e->knext = NULL;
        if (s->ktail)
                s->ktail->knext = e;
        else
                s->khead = e;
        s->ktail = e;
        e->keeping = true;
}

static void drop_outputs(Execution *e) {
        size_t keep = EXECUTION_OVERHEAD;

        if (e->dropped)
                return;
        keeping_unlink(e);
        e->dropped = true;
        (void) json_array_clear(e->outputs);
        if (e->result)
                (void) json_object_set_new(e->result, "outputs", json_array());
        e->store->bytes -= e->bytes - keep;
        e->bytes = keep;
}

static void execution_free(Execution *e) {
        ExecutionStore *s = e->store;
        ExecutionWatch *w;

        if (e->prev)
                e->prev->next = e->next;
        else
                s->head = e->next;
        if (e->next)
                e->next->prev = e->prev;
        else
                s->tail = e->prev;
        s->n--;
        s->bytes -= e->bytes;
        keeping_unlink(e);
        while ((w = e->watches)) {
                e->watches = w->next;
                free(w);
        }
        json_decref(e->outputs);
        json_decref(e->result);
        free(e->message);
        free(e->kernel_id);
        free(e->context);
        free(e);
}

/* The ended executions that keep outputs lose them, the first ended first, until the store is within its bound.
 * Constant time per call while nothing can be dropped (each output of a running cell calls it). */
static void enforce_memory(ExecutionStore *s) {
        while (s->bytes > s->memory && s->khead)
                drop_outputs(s->khead);
}

static bool expired(const Execution *e, usec_t now) {
        return execution_ended(e) && e->ttl != USEC_INFINITY && now >= e->ended && now - e->ended >= e->ttl;
}

/* Keeps the last e->keep ended executions of e's context (e, which just ended, always among them). */
static void enforce_count(ExecutionStore *s, const Execution *e) {
        size_t ended = 0;
        Execution *x, *oldest;

        for (x = s->head; x; x = x->next)
                if (execution_ended(x) && streq(x->context, e->context))
                        ended++;
        while (ended > e->keep) {
                oldest = NULL;
                for (x = s->head; x; x = x->next)
                        if (x != e && execution_ended(x) && streq(x->context, e->context) &&
                            (!oldest || x->ended < oldest->ended))
                                oldest = x;
                execution_free(oldest);
                ended--;
        }
}

/* ---- The store ---- */

int execution_store_new(size_t memory, ExecutionStore **ret) {
        ExecutionStore *s = calloc(1, sizeof *s);

        if (!s)
                return -ENOMEM;
        s->memory = memory;
        *ret = s;
        return 0;
}

void execution_store_free(ExecutionStore *s) {
        if (!s)
                return;
        while (s->head)
                execution_free(s->head);
        free(s);
}

void execution_store_set_memory(ExecutionStore *s, size_t memory) {
        s->memory = memory;
        enforce_memory(s);
}

size_t execution_store_bytes(const ExecutionStore *s) {
        return s->bytes;
}

void execution_store_expire(ExecutionStore *s, usec_t now) {
        Execution *e = s->head, *next;

        for (; e; e = next) {
                next = e->next;
                if (expired(e, now))
                        execution_free(e);
        }
}

Execution *execution_find(ExecutionStore *s, const char *id) {
        if (!id)
                return NULL;
        for (Execution *e = s->head; e; e = e->next)
                if (streq(e->id, id))
                        return e;
        return NULL;
}

int execution_store_list(ExecutionStore *s, Execution ***ret, size_t *ret_n) {
        Execution **list = calloc(s->n + 1, sizeof *list);
        size_t n = 0;

        if (!list)
                return -ENOMEM;
        for (Execution *e = s->head; e; e = e->next)
                list[n++] = e;
        *ret = list;
        *ret_n = n;
        return 0;
}

/* ---- One execution ---- */

int execution_new(ExecutionStore *s, const char *context, uid_t uid, unsigned keep, usec_t ttl, usec_t now,
                  Execution **ret) {
        Execution *e = calloc(1, sizeof *e);

        if (!e)
                return -ENOMEM;
        e->context = strdup(context);
        e->outputs = json_array();
        if (!e->context || !e->outputs) {
                free(e->context);
                json_decref(e->outputs);
                free(e);
                return -ENOMEM;
        }
        uuid_random(e->id);
        e->store = s;
        e->uid = uid;
        e->keep = keep;
        e->ttl = ttl;
        e->state = EXECUTION_QUEUED;
        e->execution_count = -1;
        e->submitted = now;
        e->prev = s->tail;
        if (s->tail)
                s->tail->next = e;
        else
                s->head = e;
        s->tail = e;
        s->n++;
        account(e, EXECUTION_OVERHEAD);
        *ret = e;
        return 0;
}

void execution_discard(Execution *e) {
        if (e)
                execution_free(e);
}

size_t execution_bytes(const Execution *e) {
        return e->bytes;
}

static int set_kernel(Execution *e, const char *kernel_id) {
        char *k;

        if (!kernel_id || streq_ptr(kernel_id, e->kernel_id))
                return 0;
        k = strdup(kernel_id);
        if (!k)
                return -ENOMEM;
        free(e->kernel_id);
        e->kernel_id = k;
        return 0;
}

int execution_start(Execution *e, const char *kernel_id, usec_t now) {
        if (e->state != EXECUTION_QUEUED)
                return -EINVAL;
        e->state = EXECUTION_RUNNING;
        e->started = now;
        return set_kernel(e, kernel_id);
}

int execution_output(Execution *e, const json_t *output) {
        json_t *copy;
        uint64_t seq;

        if (execution_ended(e) || !output)
                return -EINVAL;
        copy = json_deep_copy(output);
        if (!copy || json_array_append_new(e->outputs, copy) < 0)
                return -ENOMEM;
        seq = e->n_outputs++;
        account(e, execution_json_size(copy));
        for (ExecutionWatch *w = e->watches, *next; w; w = next) {
                next = w->next; /* a watcher may unwatch itself */
                if (w->watcher.on_output)
                        w->watcher.on_output(w->userdata, e, seq, copy);
        }
        enforce_memory(e->store);
        return 0;
}

int execution_end(Execution *e, ExecutionState state, long long execution_count, const char *kernel_id, json_t *result,
                  bool is_error, const char *message, usec_t now) {
        ExecutionStore *s = e->store;
        ExecutionWatch *w;

        if (execution_ended(e) || state < EXECUTION_OK || state >= _EXECUTION_STATE_MAX) {
                json_decref(result);
                return -EINVAL;
        }
        /* Out of memory loses the kernel's id or the message, never the end: the watchers must be answered, and
         * the caller's tie to the cell is gone after this. */
        (void) set_kernel(e, kernel_id);
        e->message = message ? strdup(message) : NULL;
        e->state = state;
        e->ended = now;
        if (execution_count >= 0)
                e->execution_count = execution_count;
        e->result = result;
        e->result_is_error = is_error;
        if (result)
                account(e, execution_json_size(result));
        keeping_append(e);
        while ((w = e->watches)) {
                e->watches = w->next;
                if (w->watcher.on_end)
                        w->watcher.on_end(w->userdata, e);
                free(w);
        }
        e->owner = NULL;
        enforce_count(s, e);
        enforce_memory(s);
        return 0;
}

int execution_watch(Execution *e, const ExecutionWatcher *watcher, void *userdata, ExecutionWatch **ret) {
        ExecutionWatch *w;

        if (execution_ended(e))
                return -EINVAL;
        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->e = e;
        w->watcher = *watcher;
        w->userdata = userdata;
        /* At the end of the list, so that watchers hear of each output in the order they came. */
        ExecutionWatch **p = &e->watches;
        while (*p)
                p = &(*p)->next;
        *p = w;
        *ret = w;
        return 0;
}

void execution_unwatch(ExecutionWatch *w) {
        if (!w)
                return;
        for (ExecutionWatch **p = &w->e->watches; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        free(w);
}

/* ---- Accessors ---- */

const char *execution_id(const Execution *e) {
        return e->id;
}

const char *execution_context(const Execution *e) {
        return e->context;
}

uid_t execution_uid(const Execution *e) {
        return e->uid;
}

ExecutionState execution_state(const Execution *e) {
        return e->state;
}

bool execution_ended(const Execution *e) {
        return e->state >= EXECUTION_OK;
}

uint64_t execution_n_outputs(const Execution *e) {
        return e->n_outputs;
}

bool execution_outputs_dropped(const Execution *e) {
        return e->dropped;
}

const json_t *execution_get_output(const Execution *e, uint64_t seq) {
        if (e->dropped || seq >= e->n_outputs)
                return NULL;
        return json_array_get(e->outputs, (size_t) seq);
}

const json_t *execution_result(const Execution *e, bool *ret_is_error, const char **ret_message) {
        if (ret_is_error)
                *ret_is_error = e->result_is_error;
        if (ret_message)
                *ret_message = e->message;
        return e->result;
}

void execution_set_owner(Execution *e, void *owner) {
        e->owner = owner;
}

void *execution_owner(const Execution *e) {
        return e->owner;
}

void execution_reply(const Execution *e, ReplyExecution *ret) {
        *ret = (ReplyExecution){
                .id = e->id,
                .context = e->context,
                .kernel_id = e->kernel_id,
                .state = execution_state_to_string(e->state),
                .execution_count = e->execution_count,
                .submitted_at = e->submitted,
                .started_at = e->started,
                .ended_at = e->ended,
                .outputs = (long long) e->n_outputs,
                .outputs_dropped = e->dropped,
        };
}

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config-value.h"
#include "exec.h"
#include "handlers-private.h"
#include "handlers.h"
#include "kernelspec.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

/* What the table says of a method, checked before its handler runs. */
typedef enum MethodFlags {
        METHOD_CONFIGURE = 1 << 0, /* changes the configuration: for root and the daemon's own user only */
} MethodFlags;

typedef struct Method {
        const char *name;
        control_handler_t handler; /* given the Handlers */
        MethodFlags flags;
} Method;

/* A control request waiting for something to happen. */
typedef enum WaitFor {
        WAIT_READY,   /* start, restart: the context ready (or failing) */
        WAIT_STOPPED, /* stop */
        WAIT_PROBE,   /* check: ready, then a heartbeat answered after we asked */
        WAIT_ALL,     /* wait: every named context ready */
        WAIT_REMOVED, /* remove: the removed context stopped; answered with the reload report */
} WaitFor;
typedef struct Waiter {
        struct Waiter *next;
        Handlers *h;
        ControlRequest *req;
        Context *ctx;  /* NULL for WAIT_ALL */
        json_t *names; /* WAIT_ALL: the contexts, an array of strings */
        WaitFor want;
        bool probing; /* WAIT_PROBE: a ping is out */
        uint64_t hb_base;
        char expect[37]; /* WAIT_PROBE: check --expect's kernel_id, "" when none */
        json_t *report;  /* WAIT_REMOVED: the answer (owned) */
        uv_timer_t timer;
} Waiter;

void handlers_set_executions_memory(Handlers *h, size_t bytes) {
        execution_store_set_memory(h->executions, bytes);
}

/* ---- Replies (reply.h) ---- */

/* The contexts named (NULL or empty: all the peer sees), their status in a new array of *ret_n. */
static ReplyContext *contexts_reply(Handlers *h, json_t *names, const ControlPeer *peer, size_t *ret_n) {
        size_t n_all, n = 0, i;
        Context *const *all = h->host.contexts(h->host.userdata, &n_all);
        ReplyContext *list = calloc((json_array_size(names) ?: n_all) + 1, sizeof(ReplyContext));
        json_t *v;

        if (!list)
                return NULL;
        if (json_array_size(names) > 0) {
                json_array_foreach(names, i, v) {
                        Context *c = handlers_find(h, json_string_value(v));
                        if (c)
                                context_reply(c, &list[n++]);
                }
        } else
                for (i = 0; i < n_all; i++)
                        if (handlers_peer_sees(peer, all[i]))
                                context_reply(all[i], &list[n++]);
        *ret_n = n;
        return list;
}

/* The answer to status and wait: the daemon, and the contexts named (NULL or empty: all the peer sees). NULL on
 * out of memory. */
static json_t *status_result(Handlers *h, json_t *names, const ControlPeer *peer) {
        _cleanup_free_ char *degraded = NULL;
        ReplyStatus r = {};
        json_t *j = NULL;

        r.contexts = contexts_reply(h, names, peer, &r.n_contexts);
        if (!r.contexts)
                return NULL;
        h->host.status(h->host.userdata, peer, &r.supervisor, &degraded);
        (void) reply_status_encode(&r, &j);
        free(r.contexts);
        return j;
}

/* check's verdict: c answers, and the daemon that says so. */
/* check's answer; expect (may be "") is the kernel the caller knew, whose namespace may have been rebuilt. */
static json_t *check_json(Handlers *h, const Context *c, const ControlPeer *peer, const char *expect) {
        _cleanup_free_ char *degraded = NULL;
        ReplyCheck r = {};
        json_t *j = NULL;

        h->host.status(h->host.userdata, peer, &r.supervisor, &degraded);
        context_reply(c, &r.context);
        if (expect[0] && context_rebuilt(c, expect, &r.rebuilt.cells)) {
                r.rebuilt.valid = true;
                r.rebuilt.kernel_id = expect;
        }
        return reply_check_encode(&r, &j) < 0 ? NULL : j;
}

/* The data of a timeout while waiting for c. */
static json_t *timed_out_json(const Context *c) {
        ReplyTimedOut r;
        json_t *j = NULL;

        context_reply(c, &r.context);
        return reply_timed_out_encode(&r, &j) < 0 ? NULL : j;
}

/* A removal's report (from the reload) with name under "stopping": its kernel had not exited by the timeout. */
static json_t *report_with_stopping(const json_t *report, const char *name) {
        _cleanup_(reply_report_done) ReplyReport r = {};
        const char **decoded;
        json_t *j = NULL;

        if (reply_report_decode(report, &r, NULL) < 0)
                return NULL;
        /* Borrowed for the encoding; what the decoder allocated goes back before reply_report_done(). */
        decoded = r.stopping;
        r.stopping = &name;
        r.n_stopping = 1;
        (void) reply_report_encode(&r, &j);
        r.stopping = decoded;
        r.n_stopping = 0;
        return j;
}

/* ---- Waiters ---- */

static void waiter_close_cb(uv_handle_t *h) {
        Waiter *w = h->data;

        json_decref(w->names);
        json_decref(w->report);
        free(w);
}

static void waiter_free(Waiter *w) {
        Waiter **p = &w->h->waiters;

        while (*p && *p != w)
                p = &(*p)->next;
        if (*p)
                *p = w->next;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *) &w->timer, waiter_close_cb);
}

/* Answers w (result, or an error when code != 0) and frees it. The request
 * is freed by its answer: no cancel may fire after it. */
static void waiter_answer(Waiter *w, int code, json_t *data_or_result, const char *message) {
        control_request_set_cancel(w->req, NULL, NULL);
        if (code)
                control_request_error(w->req, code, data_or_result, "%s", message);
        else
                control_request_reply(w->req, data_or_result);
        waiter_free(w);
}

static void waiter_timeout_cb(uv_timer_t *t) {
        Waiter *w = t->data;
        char msg[512];

        if (w->want == WAIT_ALL) {
                waiter_answer(w, KS_ERR_TIMEOUT, status_result(w->h, w->names, control_request_peer(w->req)),
                              "not every context was ready within the timeout");
                return;
        }
        if (w->want == WAIT_REMOVED) {
                /* The removal is done either way; the report says whose kernel has not exited yet. */
                waiter_answer(w, 0, report_with_stopping(w->report, context_name(w->ctx)), NULL);
                return;
        }
        snprintf(msg, sizeof msg, "%s: not %s within the timeout (state %s%s%s)", context_name(w->ctx),
                 w->want == WAIT_STOPPED               ? "stopped"
                 : w->want == WAIT_PROBE && w->probing ? "answering"
                                                       : "ready",
                 context_state_to_string(context_state(w->ctx)), context_last_error(w->ctx) ? ": " : "",
                 context_last_error(w->ctx) ?: "");
        waiter_answer(w, KS_ERR_TIMEOUT, timed_out_json(w->ctx), msg);
}

static void waiter_cancel_cb(ControlRequest *req, void *data) {
        waiter_free(data);
}

static Waiter *waiter_add(Handlers *h, ControlRequest *req, Context *c, WaitFor want, usec_t timeout) {
        Waiter *w = calloc(1, sizeof *w);

        if (!w) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return NULL;
        }
        *w = (Waiter){ .next = h->waiters, .h = h, .req = req, .ctx = c, .want = want };
        h->waiters = w;
        uv_timer_init(h->host.loop, &w->timer);
        w->timer.data = w;
        uv_timer_start(&w->timer, waiter_timeout_cb, (uint64_t) ((timeout + USEC_PER_MSEC - 1) / USEC_PER_MSEC), 0);
        control_request_set_cancel(req, waiter_cancel_cb, w);
        return w;
}

static bool state_is_up(ContextStateKind st) {
        return st == CONTEXT_READY || st == CONTEXT_BUSY;
}

/* Moves w on if the state of its context(s) allows; may answer and free it. */
static void waiter_step(Handlers *h, Waiter *w) {
        ContextStateKind st = w->ctx ? context_state(w->ctx) : CONTEXT_STOPPED;
        char msg[512];

        switch (w->want) {
        case WAIT_STOPPED:
                if (st == CONTEXT_STOPPED)
                        waiter_answer(w, 0, context_to_json(w->ctx), NULL);
                return;
        case WAIT_REMOVED:
                if (st == CONTEXT_STOPPED)
                        waiter_answer(w, 0, TAKE_PTR(w->report), NULL);
                return;
        case WAIT_READY:
                if (state_is_up(st))
                        waiter_answer(w, 0, context_to_json(w->ctx), NULL);
                else if (st == CONTEXT_BACKOFF || st == CONTEXT_FAILED || st == CONTEXT_STOPPED) {
                        snprintf(msg, sizeof msg, "%s: %s (state %s)", context_name(w->ctx),
                                 context_last_error(w->ctx) ?: "did not start", context_state_to_string(st));
                        waiter_answer(w, KS_ERR_FAILED, context_to_json(w->ctx), msg);
                }
                return;
        case WAIT_PROBE:
                /* A kernel that died while probed is waited for again: the verdict names its successor. */
                if (!state_is_up(st) && st != CONTEXT_UNRESPONSIVE)
                        w->probing = false;
                else if (!w->probing && context_probe(w->ctx, &w->hb_base) >= 0)
                        w->probing = true;
                else if (w->probing && context_hb_answers(w->ctx) > w->hb_base)
                        waiter_answer(w, 0, check_json(h, w->ctx, control_request_peer(w->req), w->expect), NULL);
                return;
        case WAIT_ALL: {
                size_t i;
                json_t *v;
                json_array_foreach(w->names, i, v) {
                        Context *c = handlers_find(h, json_string_value(v));
                        if (c && !state_is_up(context_state(c)))
                                return;
                }
                waiter_answer(w, 0, status_result(h, w->names, control_request_peer(w->req)), NULL);
                return;
        }
        }
}

/* Moves on the waiters that c (NULL: any) concerns. */
static void waiters_check(Handlers *h, Context *c) {
        Waiter *w, *next;

        for (w = h->waiters; w; w = next) {
                next = w->next;
                if (!c || w->ctx == c || w->want == WAIT_ALL)
                        waiter_step(h, w);
        }
}

void handlers_context_changed(Handlers *h, Context *c) {
        waiters_check(h, c);
}

/* A probe waiting for c is answered. */
void handlers_heartbeat(Handlers *h, Context *c) {
        Waiter *w, *next;

        for (w = h->waiters; w; w = next) {
                next = w->next;
                if (w->ctx == c && w->want == WAIT_PROBE)
                        waiter_step(h, w);
        }
}

void handlers_context_removed(Handlers *h, Context *c) {
        Waiter *w, *next;

        waiters_check(h, c); /* a stop waiter is answered */
        for (w = h->waiters; w; w = next) {
                next = w->next;
                if (w->ctx == c)
                        waiter_answer(w, KS_ERR_NO_CONTEXT, NULL, "the context was removed");
        }
}

void handlers_shutdown(Handlers *h) {
        Waiter *w;

        while ((w = h->waiters)) {
                control_request_set_cancel(w->req, NULL, NULL);
                control_request_error(w->req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
                waiter_free(w);
        }
}

/* ---- Control methods ---- */

/* params.contexts, checked: an array of names of contexts the peer may see.
 * Answers the request with an error and returns -1 when it is not. */
static int request_names(Handlers *h, ControlRequest *req, json_t *params, json_t **ret) {
        json_t *names = json_object_get(params, "contexts"), *v;
        size_t i;

        if (names && !json_is_array(names)) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL, "contexts must be an array of names");
                return -1;
        }
        json_array_foreach(names, i, v) {
                Context *c;
                if (!json_is_string(v)) {
                        control_request_error(req, RPC_INVALID_PARAMS, NULL, "contexts must be an array of names");
                        return -1;
                }
                c = handlers_find(h, json_string_value(v));
                /* Another uid's context is answered as a missing one, so no name can be probed. */
                if (!c || !handlers_peer_sees(control_request_peer(req), c)) {
                        control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s",
                                              json_string_value(v));
                        return -1;
                }
        }
        *ret = names;
        return 0;
}

static void method_status(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        json_t *names;

        if (request_names(h, req, params, &names) < 0)
                return;
        control_request_reply(req, status_result(h, names, control_request_peer(req)));
}

/* The OpenMetrics text of the daemon and of the contexts the peer may see: {"content_type", "text"}. */
static void method_metrics(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        const ControlPeer *peer = control_request_peer(req);
        size_t n_all, n = 0;
        Context *const *all = h->host.contexts(h->host.userdata, &n_all);
        _cleanup_free_ Context **seen = calloc(n_all + 1, sizeof(Context *));
        _cleanup_free_ char *text = NULL;
        json_t *j = NULL;
        MetricsDaemon d = {};

        h->host.metrics(h->host.userdata, &d);
        d.privileged = handlers_peer_privileged(peer);
        for (size_t i = 0; seen && i < n_all; i++)
                if (handlers_peer_sees(peer, all[i]))
                        seen[n++] = all[i];
        if (!seen || metrics_render(&d, seen, n, &text) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        /* Many contexts make a long reply: it may wait unread on the connection (JSON doubles each newline). */
        control_request_allow_queue(req, 2 * strlen(text));
        (void) reply_metrics_encode(&(ReplyMetrics){ .content_type = METRICS_CONTENT_TYPE, .text = text }, &j);
        control_request_reply(req, j);
}

/* One kernels listing (kernelspec_list), done in libuv's thread pool with the peer's rights: a home of many
 * specs must not hold up the loop, nor a link of the peer's lead the root daemon where the peer cannot read. */
typedef struct KernelsJob {
        uv_work_t work;
        ControlRequest *req;
        uid_t uid;
        gid_t gid;
        char *jupyter_path; /* the daemon's JUPYTER_PATH, or NULL */
        char **dirs;
        Kernelspec **specs;
        size_t n;
        char *cut;
        int r;
} KernelsJob;

static void kernels_job_free(KernelsJob *j) {
        for (size_t i = 0; i < j->n; i++)
                kernelspec_free(j->specs[i]);
        free(j->specs);
        strv_free(j->dirs);
        free(j->jupyter_path);
        free(j->cut);
        free(j);
}

/* In a thread of the pool: nothing here touches the loop or the daemon's state. */
static void kernels_work(uv_work_t *w) {
        static const KernelspecLimits limits = {
                .max_specs = KERNELSPEC_LIST_MAX_SPECS,
                .max_entries = KERNELSPEC_LIST_MAX_ENTRIES,
                .max_bytes = KERNELSPEC_LIST_MAX_BYTES,
        };
        KernelsJob *j = w->data;
        _cleanup_free_ char *home = NULL;
        KernelspecUser u;

        j->r = kernelspec_user_lookup(NULL, j->uid, &u, &home);
        if (j->r == -ESRCH) /* a uid with no passwd entry: no home, its own rights and root's files */
                u = (KernelspecUser){ .uid = j->uid, .gid = j->gid, .switch_fs = geteuid() == 0 && j->uid != 0 };
        else if (j->r < 0)
                return;
        j->r = kernelspec_dirs(j->jupyter_path, home, &j->dirs);
        if (j->r >= 0)
                j->r = kernelspec_list(j->dirs, &u, &limits, &j->specs, &j->n, &j->cut);
        kernelspec_user_done(&u);
}

static void kernels_done(uv_work_t *w, int status) {
        KernelsJob *j = w->data;
        _cleanup_free_ ReplyKernelspec *list = NULL;
        json_t *reply = NULL;
        int r = status < 0 ? status : j->r;

        if (r >= 0 && !(list = calloc(j->n + 1, sizeof *list)))
                r = -ENOMEM;
        for (size_t i = 0; r >= 0 && i < j->n; i++)
                list[i] = (ReplyKernelspec){
                        .name = j->specs[i]->name,
                        .display_name = j->specs[i]->display_name,
                        .language = j->specs[i]->language,
                        .interrupt_mode = interrupt_mode_to_string(j->specs[i]->interrupt_mode),
                        .path = j->specs[i]->path,
                        .argv = (const char **) j->specs[i]->argv,
                        .n_argv = strv_length(j->specs[i]->argv),
                };
        if (r >= 0)
                r = reply_kernels_encode(&(ReplyKernels){ .kernels = list,
                                                          .n_kernels = j->n,
                                                          .dirs = (const char **) j->dirs,
                                                          .n_dirs = strv_length(j->dirs),
                                                          .cut = j->cut },
                                         &reply);
        if (r < 0)
                control_request_error(j->req, RPC_INTERNAL_ERROR, NULL, "cannot list the kernelspecs: %s",
                                      strerror(-r));
        else {
                /* At most KERNELSPEC_LIST_MAX_BYTES and the JSON-RPC envelope: it may wait unread. */
                control_request_allow_queue(j->req, 2 * KERNELSPEC_LIST_MAX_BYTES);
                control_request_reply(j->req, reply);
        }
        kernels_job_free(j);
}

/* The kernelspecs a context of the peer's could name with kernel = (kernelspec.h): those in the daemon's
 * JUPYTER_PATH, the peer's home and the system directories that the peer or root owns, sorted by name, read with
 * the peer's rights and within KernelspecLimits. A peer gone before the answer: the answer is dropped. */
static void method_kernels(ControlRequest *req, json_t *params, void *userdata) {
        const ControlPeer *peer = control_request_peer(req);
        const char *jp = getenv("JUPYTER_PATH");
        Handlers *h = userdata;
        KernelsJob *j;
        int r;

        (void) params;
        j = calloc(1, sizeof *j);
        if (!j || (jp && !(j->jupyter_path = strdup(jp)))) {
                free(j);
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        }
        *j = (KernelsJob){ .req = req, .uid = peer->uid, .gid = peer->gid, .jupyter_path = j->jupyter_path };
        j->work.data = j;
        r = uv_queue_work(h->host.loop, &j->work, kernels_work, kernels_done);
        if (r < 0) {
                kernels_job_free(j);
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "cannot list the kernelspecs: %s",
                                      uv_strerror(r));
        }
}

/* params.timeout in seconds into *ret: def_sec when absent; more than 0;
 * above a day taken as a day. Anything else is answered with an error and
 * -EINVAL returned. */
static int request_timeout(ControlRequest *req, json_t *params, unsigned def_sec, usec_t *ret) {
        json_t *t = json_object_get(params, "timeout");

        if (!t) {
                *ret = def_sec * USEC_PER_SEC;
                return 0;
        }
        if (json_is_number(t) &&
            protocol_timeout_usec(json_number_value(t), PROTOCOL_MAX_TIMEOUT_SEC * USEC_PER_SEC, ret) >= 0)
                return 0;
        control_request_error(
                req, RPC_INVALID_PARAMS, NULL,
                "params.timeout must be a number of seconds greater than 0 (more than %d is taken as %d)",
                PROTOCOL_MAX_TIMEOUT_SEC, PROTOCOL_MAX_TIMEOUT_SEC);
        return -EINVAL;
}

static void method_start(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        ContextStateKind st;
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        st = context_state(c);
        if (st == CONTEXT_READY || st == CONTEXT_BUSY || st == CONTEXT_UNRESPONSIVE)
                return control_request_reply(req, context_to_json(c));
        log_info("%s: start requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        waiter_add(h, req, c, WAIT_READY, timeout);
        context_start(c);
}

static void method_restart(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        log_info("%s: restart requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        context_journal_forget(c, "restart requested");
        waiter_add(h, req, c, WAIT_READY, timeout);
        context_restart(c);
}

static void method_stop(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        /* Asked to go: the next start is empty. */
        context_journal_forget(c, "stop requested");
        if (context_state(c) == CONTEXT_STOPPED)
                return control_request_reply(req, context_to_json(c));
        log_info("%s: stop requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        waiter_add(h, req, c, WAIT_STOPPED, timeout);
        context_stop(c);
}

/* check: ready, and answering now (a heartbeat round trip after the request). */
static void method_check(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        Context *c = handlers_request_context(h, req, params);
        json_t *expect = json_object_get(params, "expect");
        usec_t timeout;
        Waiter *w;

        if (!c || request_timeout(req, params, 10, &timeout) < 0)
                return;
        if (expect && (!json_is_string(expect) || json_string_length(expect) > 36))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "params.expect must be a kernel_id (at most 36 characters)");
        w = waiter_add(h, req, c, WAIT_PROBE, timeout);
        if (!w)
                return;
        snprintf(w->expect, sizeof w->expect, "%s", expect ? json_string_value(expect) : "");
        waiter_step(h, w);
}

/* wait: every named context (none named: every autostart one the peer sees) ready. */
static void method_wait(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        json_t *names;
        usec_t timeout;
        Waiter *w;

        if (request_timeout(req, params, 60, &timeout) < 0 || request_names(h, req, params, &names) < 0)
                return;
        if (names && json_array_size(names) > 0)
                names = json_incref(names);
        else {
                size_t n;
                Context *const *all = h->host.contexts(h->host.userdata, &n);
                names = json_array();
                for (size_t i = 0; i < n; i++)
                        if (context_autostart(all[i]) && handlers_peer_sees(control_request_peer(req), all[i]))
                                json_array_append_new(names, json_string(context_name(all[i])));
        }
        w = waiter_add(h, req, NULL, WAIT_ALL, timeout);
        if (!w) {
                json_decref(names);
                return;
        }
        w->names = names;
        waiter_step(h, w);
}

static void reload_reply(Handlers *h, ControlRequest *req, bool dry_run) {
        _cleanup_free_ char *error = NULL;
        json_t *report = NULL;
        int r;

        r = h->host.reload(h->host.userdata, dry_run, &report, &error);
        if (r < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s%s", error ?: strerror(-r),
                                             error ? "" : "; nothing changed");
        control_request_reply(req, report);
}

static void method_reload(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;

        if (h->host.stopping(h->host.userdata))
                return control_request_error(req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
        reload_reply(h, req, json_is_true(json_object_get(params, "dry_run")));
}

/* How long remove waits for the removed context's kernel: its stop ends by stop_timeout (SIGKILL), and kernelctl
 * waits 60 s for the answer. */
static usec_t remove_timeout(const Context *c) {
        usec_t def = context_config(c)->stop_timeout + USEC_PER_SEC;

        return def < 55 * USEC_PER_SEC ? def : 55 * USEC_PER_SEC;
}

/* The answer to remove once the removed context c has stopped (or the timeout says it is still stopping):
 * timeout is the request's, or remove_timeout() when it gave none. */
static void remove_answer(Handlers *h, ControlRequest *req, usec_t timeout, Context *c, json_t *report) {
        Waiter *w;

        /* The reload kept c when it still finds it by its name; else c was removed, and stays valid while the
         * loop does not run. */
        if (handlers_find(h, context_name(c)) == c || context_state(c) == CONTEXT_STOPPED)
                return control_request_reply(req, report);
        w = waiter_add(h, req, c, WAIT_REMOVED, timeout ?: remove_timeout(c));
        if (w)
                w->report = report;
        else
                json_decref(report); /* waiter_add answered the request */
}

/* remove: deletes contexts_dir/NAME.ini and reloads; a reload that fails puts the file back. It answers once
 * the context's kernel is gone, so that a script can rely on it. A uid other than root and the daemon's removes
 * only the contexts it added. */
static void method_remove(ControlRequest *req, json_t *params, void *userdata) {
        Handlers *h = userdata;
        const char *name = json_string_value(json_object_get(params, "context"));
        _cleanup_free_ char *path = NULL, *file = NULL, *text = NULL, *error = NULL;
        _cleanup_close_ int dirfd = -1;
        const ContextConfig *cc;
        json_t *report = NULL;
        usec_t timeout;
        size_t len;
        Context *c;
        int r;

        if (!name || !context_name_valid(name))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "invalid context name: expected [A-Za-z0-9_.-]{1,64}");
        /* A bad timeout is refused before anything is removed; 0 stands for "none given". */
        if (request_timeout(req, params, 0, &timeout) < 0)
                return;
        c = handlers_find(h, name);
        /* Another uid's context is answered as a missing one, so no name can be probed. */
        if (!c || !handlers_peer_sees(control_request_peer(req), c))
                return control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s", name);
        if (!handlers_peer_may_remove(req, c))
                return;
        cc = context_config(c);
        if (asprintf(&file, "%s.ini", name) < 0 ||
            asprintf(&path, "%s/%s", h->host.contexts_dir(h->host.userdata), file) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        if (!cc->source.file || !streq(cc->source.file, path))
                return control_request_error(req, KS_ERR_FAILED, NULL,
                                             "context %s is defined at %s:%u, not in %s: edit that file", name,
                                             cc->source.file ?: "?", cc->source.line, path);
        r = read_file(path, 1024 * 1024, &text, &len);
        if (r >= 0)
                dirfd = handlers_open_contexts_dir(h);
        if (r < 0 || dirfd < 0 || unlinkat(dirfd, file, 0) < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot remove %s: %s", path,
                                             strerror(r < 0       ? -r
                                                      : dirfd < 0 ? -dirfd
                                                                  : errno));
        r = h->host.reload(h->host.userdata, false, &report, &error);
        if (r < 0) {
                (void) write_file_atomic_at(dirfd, file, text, len, 0644, (uid_t) -1, (gid_t) -1);
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s; %s was put back",
                                             handlers_reload_error_for(req, path, error ?: strerror(-r)), path);
        }
        remove_answer(h, req, timeout, c, handlers_report_for(req, report, name, false));
}

/* ---- The table ---- */

static const Method methods[] = {
        { "status", method_status, 0 },
        { "check", method_check, 0 },
        { "wait", method_wait, 0 },
        { "start", method_start, 0 },
        { "stop", method_stop, 0 },
        { "restart", method_restart, 0 },
        { "execute", method_execute, 0 },
        { "interrupt", method_interrupt, 0 },
        { "reload", method_reload, METHOD_CONFIGURE },
        /* Another uid adds and removes its own contexts: the handlers check what it may (handlers-add.c). */
        { "add", method_add, 0 },
        { "remove", method_remove, 0 },
        { "metrics", method_metrics, 0 },
        { "kernels", method_kernels, 0 },
        { "history", method_history, 0 },
        { "attach", method_attach, 0 },
        { "executions", method_executions, 0 },
        { "cancel", method_cancel, 0 },
};
_Static_assert(ELEMENTSOF(methods) == N_METHODS, "N_METHODS counts the rows of methods[]");

/* Changing the configuration is for root and the daemon's own user. */
static bool peer_may_configure(ControlRequest *req) {
        const ControlPeer *peer = control_request_peer(req);

        if (handlers_peer_privileged(peer))
                return true;
        control_request_error(req, KS_ERR_PERMISSION, NULL,
                              "permission denied: only root may change the configuration");
        return false;
}

/* Every control request comes here: the control server found its method in the table, by the same name. */
static void method_dispatch(ControlRequest *req, json_t *params, void *userdata) {
        const char *name = control_request_method(req);

        for (size_t i = 0; i < N_METHODS; i++) {
                if (!streq(methods[i].name, name))
                        continue;
                if ((methods[i].flags & METHOD_CONFIGURE) && !peer_may_configure(req))
                        return;
                return methods[i].handler(req, params, userdata);
        }
        control_request_error(req, RPC_METHOD_NOT_FOUND, NULL, "unknown method");
}

int handlers_new(const HandlersHost *host, Handlers **ret) {
        Handlers *h = calloc(1, sizeof *h);

        if (!h)
                return -ENOMEM;
        h->host = *host;
        if (execution_store_new(host->executions_memory, &h->executions) < 0) {
                free(h);
                return -ENOMEM;
        }
        for (size_t i = 0; i < N_METHODS; i++)
                h->control[i] = (ControlMethod){ .name = methods[i].name, .handler = method_dispatch };
        *ret = h;
        return 0;
}

const ControlMethod *handlers_methods(const Handlers *h, size_t *ret_n) {
        *ret_n = N_METHODS;
        return h->control;
}

void handlers_free(Handlers *h) {
        if (h)
                execution_store_free(h->executions);
        free(h);
}

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "context.h"
#include "control.h"
#include "exec.h"
#include "freeze.h"
#include "log.h"
#include "notify.h"
#include "protocol.h"
#include "state.h"
#include "preload.h"
#include "supervisor.h"
#include "util.h"

struct Supervisor {
        uv_loop_t *loop;
        void *zmq;      /* the one libzmq context */
        Config *config; /* owned */
        int state_dirfd;
        SupervisorState sstate; /* generation, boot_id, pid, started_at */
        bool pid1;              /* we are a container's init */
        ContextHost host;       /* what every context is given */

        Context **contexts; /* sorted by name, as config->contexts */
        size_t n_contexts;
        Context **retiring; /* removed by a reload, stopping; freed once stopped */
        size_t n_retiring;
        uv_timer_t retire_timer; /* frees stopped retiring contexts outside their callbacks */
        uv_timer_t state_retry;  /* writes unsaved context state again while any is unsaved */
        /* The directory defaults the config was loaded with, for reloads (owned copies). */
        char *default_runtime_dir, *default_state_dir, *default_contexts_dir;

        ControlServer *control;
        Notify *notify;
        int signal_fd; /* SIGTERM, SIGINT, SIGHUP, with their sender */
        uv_poll_t signal_poll;
        uv_signal_t sig_chld;
        uv_timer_t shutdown_timer;
        struct Waiter *waiters; /* control requests waiting for a state */

        uv_timer_t tick;       /* samples the clocks to see freezes */
        ClockSample clock;     /* the last sample */
        unsigned resumes;      /* freezes seen since start */
        usec_t last_resume_at; /* CLOCK_REALTIME, 0 when none */
        bool ready_sent;
        bool stopping;
        int exit_code;
};

/* After the last kernel's stop_timeout, a shutdown that still waits is stuck:
 * this much later everything left is killed. */
#define SHUTDOWN_GRACE_MSEC 5000
/* While a state file cannot be written (a full disk), how often every unsaved one is tried again. */
#define STATE_RETRY_MSEC 2000

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
        Supervisor *sup;
        ControlRequest *req;
        Context *ctx;  /* NULL for WAIT_ALL */
        json_t *names; /* WAIT_ALL: the contexts, an array of strings */
        WaitFor want;
        bool probing; /* WAIT_PROBE: a ping is out */
        uint64_t hb_base;
        json_t *report; /* WAIT_REMOVED: the answer (owned) */
        uv_timer_t timer;
} Waiter;

/* ---- Lookup and visibility ---- */

static Context *supervisor_find(Supervisor *s, const char *name) {
        for (size_t i = 0; i < s->n_contexts; i++)
                if (streq(context_name(s->contexts[i]), name))
                        return s->contexts[i];
        return NULL;
}

/* Root and the daemon's own uid see everything; another uid only the
 * contexts whose kernels run as that uid. */
static bool peer_sees(const ControlPeer *peer, const Context *c) {
        return peer->uid == 0 || peer->uid == getuid() || context_uid(c) == peer->uid;
}

/* ContextHost.taken_ports. */
static int supervisor_taken_ports(void *userdata, const Context *except, uint16_t **ret, size_t *ret_n) {
        Supervisor *s = userdata;
        uint16_t *v = calloc(s->n_contexts * _CHANNEL_MAX + 1, sizeof(uint16_t));
        size_t n = 0;

        if (!v)
                return -ENOMEM;
        /* Every context's state is loaded at its creation, also of contexts never launched in this run. */
        for (size_t i = 0; i < s->n_contexts; i++)
                if (s->contexts[i] != except && context_ports(s->contexts[i], v + n))
                        n += _CHANNEL_MAX;
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- READY, STATUS and shutdown progress ---- */

/* Why the daemon is degraded, NULL when it is not: "cannot write state file PATH: ERR" of the first
 * context whose state is not on disk, and how many more there are. For a peer (NULL: the service manager)
 * only its own contexts are named: the path holds the name. *ret is newly allocated. */
static int supervisor_degraded(Supervisor *s, const ControlPeer *peer, char **ret) {
        const char *first = NULL;
        size_t n = 0;
        bool hidden = false;

        for (size_t i = 0; i < s->n_contexts; i++) {
                if (!context_save_error(s->contexts[i]))
                        continue;
                if (peer && !peer_sees(peer, s->contexts[i]))
                        hidden = true;
                else if (n++ == 0)
                        first = context_save_error(s->contexts[i]);
        }
        *ret = NULL;
        if (n == 0 && !hidden)
                return 0;
        if (n == 0) {
                if (asprintf(ret, "cannot write state files in %s", s->config->state_dir) < 0)
                        *ret = NULL;
        } else if (n == 1)
                *ret = strdup(first);
        else if (asprintf(ret, "%s (and %zu more contexts unsaved)", first, n - 1) < 0)
                *ret = NULL;
        return *ret ? 1 : -ENOMEM;
}

static void supervisor_update_status(Supervisor *s) {
        unsigned count[_CONTEXT_STATE_MAX] = { 0 };
        char buf[512];
        size_t l;

        for (size_t i = 0; i < s->n_contexts; i++)
                count[context_state(s->contexts[i])]++;
        l = (size_t) snprintf(buf, sizeof buf, "%u/%zu kernels ready", count[CONTEXT_READY] + count[CONTEXT_BUSY],
                              s->n_contexts);
        for (int st = 0; st < _CONTEXT_STATE_MAX; st++) {
                if (st == CONTEXT_READY || st == CONTEXT_BUSY || !count[st] || l >= sizeof buf)
                        continue;
                l += (size_t) snprintf(buf + l, sizeof buf - l, ", %u %s", count[st], context_state_to_string(st));
        }
        if (s->stopping && l < sizeof buf)
                l += (size_t) snprintf(buf + l, sizeof buf - l, " (shutting down)");
        {
                _cleanup_free_ char *degraded = NULL;
                if (supervisor_degraded(s, NULL, &degraded) > 0 && l < sizeof buf)
                        snprintf(buf + l, sizeof buf - l, "; degraded: %s", degraded);
        }

        if (!s->ready_sent) {
                /* Ready once every autostart context is ready or has failed. */
                for (size_t i = 0; i < s->n_contexts; i++) {
                        Context *c = s->contexts[i];
                        ContextStateKind st = context_state(c);
                        if (context_autostart(c) && st != CONTEXT_READY && st != CONTEXT_BUSY &&
                            st != CONTEXT_UNRESPONSIVE && st != CONTEXT_FAILED)
                                goto not_yet;
                }
                s->ready_sent = true;
                log_info("ready: %s", buf);
                notify_ready(s->notify, buf);
                return;
        }
not_yet:
        notify_status(s->notify, buf);
}

static void supervisor_finish(Supervisor *s);
static void retire_cb(uv_timer_t *t);

static void supervisor_check_shutdown(Supervisor *s) {
        if (!s->stopping)
                return;
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_state(s->contexts[i]) != CONTEXT_STOPPED)
                        return;
        for (size_t i = 0; i < s->n_retiring; i++)
                if (context_state(s->retiring[i]) != CONTEXT_STOPPED)
                        return;
        supervisor_finish(s);
}

/* ---- Waiters ---- */

static json_t *supervisor_to_json(Supervisor *s, const ControlPeer *peer);
static json_t *status_result(Supervisor *s, json_t *names, const ControlPeer *peer);

static void waiter_close_cb(uv_handle_t *h) {
        Waiter *w = h->data;

        json_decref(w->names);
        json_decref(w->report);
        free(w);
}

static void waiter_free(Waiter *w) {
        Waiter **p = &w->sup->waiters;

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
                waiter_answer(w, KS_ERR_TIMEOUT, status_result(w->sup, w->names, control_request_peer(w->req)),
                              "not every context was ready within the timeout");
                return;
        }
        if (w->want == WAIT_REMOVED) {
                /* The removal is done either way; the report says whose kernel has not exited yet. */
                json_t *report = TAKE_PTR(w->report);
                (void) json_object_set_new(report, "stopping", json_pack("[s]", context_name(w->ctx)));
                waiter_answer(w, 0, report, NULL);
                return;
        }
        snprintf(msg, sizeof msg, "%s: not %s within the timeout (state %s%s%s)", context_name(w->ctx),
                 w->want == WAIT_STOPPED               ? "stopped"
                 : w->want == WAIT_PROBE && w->probing ? "answering"
                                                       : "ready",
                 context_state_to_string(context_state(w->ctx)), context_last_error(w->ctx) ? ": " : "",
                 context_last_error(w->ctx) ?: "");
        waiter_answer(w, KS_ERR_TIMEOUT, json_pack("{s:o}", "context", context_to_json(w->ctx)), msg);
}

static void waiter_cancel_cb(ControlRequest *req, void *data) {
        waiter_free(data);
}

static Waiter *waiter_add(Supervisor *s, ControlRequest *req, Context *c, WaitFor want, usec_t timeout) {
        Waiter *w = calloc(1, sizeof *w);

        if (!w) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return NULL;
        }
        *w = (Waiter){ .next = s->waiters, .sup = s, .req = req, .ctx = c, .want = want };
        s->waiters = w;
        uv_timer_init(s->loop, &w->timer);
        w->timer.data = w;
        uv_timer_start(&w->timer, waiter_timeout_cb, (uint64_t) ((timeout + USEC_PER_MSEC - 1) / USEC_PER_MSEC), 0);
        control_request_set_cancel(req, waiter_cancel_cb, w);
        return w;
}

static bool state_is_up(ContextStateKind st) {
        return st == CONTEXT_READY || st == CONTEXT_BUSY;
}

/* Moves w on if the state of its context(s) allows; may answer and free it. */
static void waiter_step(Supervisor *s, Waiter *w) {
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
                        waiter_answer(w, 0,
                                      json_pack("{s:o, s:o}", "supervisor",
                                                supervisor_to_json(s, control_request_peer(w->req)), "context",
                                                context_to_json(w->ctx)),
                                      NULL);
                return;
        case WAIT_ALL: {
                size_t i;
                json_t *v;
                json_array_foreach(w->names, i, v) {
                        for (size_t k = 0; k < s->n_contexts; k++)
                                if (streq(context_name(s->contexts[k]), json_string_value(v)) &&
                                    !state_is_up(context_state(s->contexts[k])))
                                        return;
                }
                waiter_answer(w, 0, status_result(s, w->names, control_request_peer(w->req)), NULL);
                return;
        }
        }
}

/* Moves on the waiters that c (NULL: any) concerns. */
static void waiters_check(Supervisor *s, Context *c) {
        Waiter *w, *next;

        for (w = s->waiters; w; w = next) {
                next = w->next;
                if (!c || w->ctx == c || w->want == WAIT_ALL)
                        waiter_step(s, w);
        }
}

/* ContextHost.heartbeat: a probe waiting for c is answered. */
static void supervisor_context_heartbeat(void *userdata, Context *c) {
        Supervisor *s = userdata;
        Waiter *w, *next;

        for (w = s->waiters; w; w = next) {
                next = w->next;
                if (w->ctx == c && w->want == WAIT_PROBE)
                        waiter_step(s, w);
        }
}

static void state_retry_cb(uv_timer_t *t) {
        Supervisor *s = t->data;

        for (size_t i = 0; i < s->n_contexts; i++)
                (void) context_save_retry(s->contexts[i]);
}

/* ContextHost.save_changed: the daemon is degraded while any context is unsaved (status, STATUS=), and
 * retries on a timer. */
static void supervisor_state_changed(void *userdata, Context *c) {
        Supervisor *s = userdata;
        _cleanup_free_ char *degraded = NULL;

        if (s->state_retry.data) {
                if (supervisor_degraded(s, NULL, &degraded) != 0) {
                        if (!uv_is_active((uv_handle_t *) &s->state_retry))
                                uv_timer_start(&s->state_retry, state_retry_cb, STATE_RETRY_MSEC, STATE_RETRY_MSEC);
                } else
                        uv_timer_stop(&s->state_retry);
        }
        supervisor_update_status(s);
}

/* ContextHost.state_changed. */
static void supervisor_context_changed(void *userdata, Context *c) {
        Supervisor *s = userdata;

        if (context_state(c) == CONTEXT_STOPPED)
                for (size_t i = 0; i < s->n_retiring; i++)
                        if (s->retiring[i] == c)
                                uv_timer_start(&s->retire_timer, retire_cb, 0, 0);
        waiters_check(s, c);
        supervisor_update_status(s);
        supervisor_check_shutdown(s);
}

/* ---- Reload ---- */

/* Frees the removed contexts that have stopped, with their state, answering whoever still waited on them. */
static void retire_cb(uv_timer_t *t) {
        Supervisor *s = t->data;
        size_t keep = 0;

        for (size_t i = 0; i < s->n_retiring; i++) {
                Context *c = s->retiring[i];
                Waiter *w, *next;

                if (context_state(c) != CONTEXT_STOPPED) {
                        s->retiring[keep++] = c;
                        continue;
                }
                waiters_check(s, c); /* a stop waiter is answered */
                for (w = s->waiters; w; w = next) {
                        next = w->next;
                        if (w->ctx == c)
                                waiter_answer(w, KS_ERR_NO_CONTEXT, NULL, "the context was removed");
                }
                /* Removed and added again meanwhile: the state file belongs to the new context now. */
                if (!supervisor_find(s, context_name(c)))
                        (void) context_forget(c);
                log_info("%s: removed", context_name(c));
                context_free(c);
        }
        s->n_retiring = keep;
        supervisor_check_shutdown(s);
}

static int report_add(json_t *list, json_t *item) {
        return json_array_append_new(list, item) < 0 ? -ENOMEM : 0;
}

int supervisor_reload(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error) {
        _cleanup_(config_freep) Config *new = NULL;
        json_auto_t *added = json_array(), *removed = json_array(), *restarted = json_array(), *updated = json_array(),
                    *not_applied = json_array();
        Context **table = NULL, **created = NULL;
        size_t n_created = 0, unchanged = 0;
        ConfigDefaults d = {
                .runtime_dir = s->default_runtime_dir,
                .state_dir = s->default_state_dir,
                .contexts_dir = s->default_contexts_dir,
        };
        const struct {
                const char *key;
                const char *now;
        } fixed[] = {
                { "socket", s->config->socket_path },
                { "runtime_dir", s->config->runtime_dir },
                { "state_dir", s->config->state_dir },
        };
        int r;

        if (!added || !removed || !restarted || !updated || !not_applied)
                return -ENOMEM;
        r = config_load(s->config->path, &d, &new, ret_error);
        if (r < 0)
                return r;

        /* What only a restart of the daemon can change. */
        const char *wanted[] = { new->socket_path, new->runtime_dir, new->state_dir };
        for (size_t i = 0; i < ELEMENTSOF(fixed); i++)
                if (!streq(fixed[i].now, wanted[i])) {
                        char msg[512];
                        snprintf(msg, sizeof msg, "[supervisor] %s changed to %s: restart kernelsupd to apply it",
                                 fixed[i].key, wanted[i]);
                        if (report_add(not_applied, json_string(msg)) < 0)
                                return -ENOMEM;
                }

        /* The plan, before anything is touched. */
        for (size_t i = 0; i < new->n_contexts; i++) {
                const ContextConfig *cc = &new->contexts[i];
                Context *c = supervisor_find(s, cc->name);
                const char *why;
                if (!c)
                        r = report_add(added, json_string(cc->name));
                else if ((why = context_config_process_change(context_config(c), cc))) {
                        char reason[64];
                        snprintf(reason, sizeof reason, "%s changed", why);
                        r = report_add(restarted, json_pack("{s:s, s:s}", "name", cc->name, "reason", reason));
                } else if ((why = context_config_setting_change(context_config(c), cc)))
                        r = report_add(updated, json_pack("{s:s, s:s}", "name", cc->name, "setting", why));
                else
                        unchanged++;
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < s->n_contexts; i++)
                if (!config_find_context(new, context_name(s->contexts[i])) &&
                    report_add(removed, json_string(context_name(s->contexts[i]))) < 0)
                        return -ENOMEM;

        if (!dry_run) {
                /* Everything that can fail happens before the first change. */
                table = calloc(new->n_contexts + 1, sizeof(Context *));
                created = calloc(new->n_contexts + 1, sizeof(Context *));
                Context **grown = realloc(s->retiring, sizeof(Context *) * (s->n_retiring + s->n_contexts + 1));
                if (!table || !created || !grown) {
                        free(table);
                        free(created);
                        return -ENOMEM;
                }
                s->retiring = grown;
                for (size_t i = 0; i < new->n_contexts; i++) {
                        _cleanup_free_ char *warning = NULL;
                        Context *c = supervisor_find(s, new->contexts[i].name);
                        if (c) {
                                table[i] = c;
                                continue;
                        }
                        r = context_new(&s->host, &new->contexts[i], &table[i], &warning);
                        if (r < 0) {
                                for (size_t k = 0; k < n_created; k++)
                                        context_free(created[k]);
                                free(table);
                                free(created);
                                if (asprintf(ret_error, "Failed to set up context %s: %s", new->contexts[i].name,
                                             strerror(-r)) < 0)
                                        *ret_error = NULL;
                                return r;
                        }
                        if (warning)
                                log_warning("%s: %s", new->contexts[i].name, warning);
                        created[n_created++] = table[i];
                }

                /* Apply. Removed contexts stop and are freed once stopped. */
                for (size_t i = 0; i < s->n_contexts; i++) {
                        Context *c = s->contexts[i];
                        if (config_find_context(new, context_name(c)))
                                continue;
                        log_info("%s: removed from the configuration; stopping", context_name(c));
                        s->retiring[s->n_retiring++] = c;
                        context_stop(c);
                }
                for (size_t i = 0; i < new->n_contexts; i++) {
                        const ContextConfig *cc = &new->contexts[i];
                        Context *c = table[i];
                        bool fresh = false, process;
                        for (size_t k = 0; k < n_created && !fresh; k++)
                                fresh = created[k] == c;
                        if (fresh)
                                continue;
                        process = context_config_process_differs(context_config(c), cc);
                        bool autostart_now = cc->autostart && !context_config(c)->autostart;
                        if (context_set_config(c, cc) < 0) {
                                log_error("%s: out of memory applying the new settings", cc->name);
                                continue;
                        }
                        if (process && context_state(c) != CONTEXT_STOPPED) {
                                log_info("%s: settings of its process changed; restarting", cc->name);
                                context_restart(c);
                        } else if (autostart_now && context_state(c) == CONTEXT_STOPPED)
                                context_start(c);
                }
                free(s->contexts);
                s->contexts = table;
                s->n_contexts = new->n_contexts;
                s->config->port_min = s->host.port_min = new->port_min;
                s->config->port_max = s->host.port_max = new->port_max;
                /* The directories stay as the daemon started with them (see not_applied). */
                free(new->socket_path);
                free(new->runtime_dir);
                free(new->state_dir);
                new->socket_path = TAKE_PTR(s->config->socket_path);
                new->runtime_dir = TAKE_PTR(s->config->runtime_dir);
                new->state_dir = TAKE_PTR(s->config->state_dir);
                config_free(s->config);
                s->config = TAKE_PTR(new);
                for (size_t k = 0; k < n_created; k++)
                        if (context_autostart(created[k]))
                                context_start(created[k]);
                free(created);
                supervisor_update_status(s);
        }

        *ret_report =
                json_pack("{s:O, s:O, s:O, s:O, s:I, s:O}", "added", added, "removed", removed, "restarted", restarted,
                          "updated", updated, "unchanged", (json_int_t) unchanged, "not_applied", not_applied);
        return *ret_report ? 0 : -ENOMEM;
}

/* A reload's report as the log lines kernelctl also prints. */
static void log_reload_report(const json_t *report) {
        json_t *v;
        size_t i;

        json_array_foreach(json_object_get(report, "added"), i, v) log_info("reload: added %s", json_string_value(v));
        json_array_foreach(json_object_get(report, "restarted"), i, v)
                log_info("reload: restarted %s (%s)", json_string_value(json_object_get(v, "name")),
                         json_string_value(json_object_get(v, "reason")));
        json_array_foreach(json_object_get(report, "updated"), i, v)
                log_info("reload: updated %s in place (%s)", json_string_value(json_object_get(v, "name")),
                         json_string_value(json_object_get(v, "setting")));
        json_array_foreach(json_object_get(report, "removed"), i, v)
                log_info("reload: removed %s", json_string_value(v));
        json_array_foreach(json_object_get(report, "not_applied"), i, v)
                log_warning("reload: %s", json_string_value(v));
        log_info("reload: unchanged %lld", (long long) json_integer_value(json_object_get(report, "unchanged")));
}

/* Reload, announced to systemd; logs the outcome. */
static int supervisor_reload_announced(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error) {
        usec_t t0 = now_usec(CLOCK_MONOTONIC);
        char d[32];
        int r;

        if (!dry_run)
                notify_reloading(s->notify);
        r = supervisor_reload(s, dry_run, ret_report, ret_error);
        if (!dry_run) {
                /* READY=1 again ends the reload for systemd, whatever its outcome. */
                s->ready_sent = false;
                supervisor_update_status(s);
                if (!s->ready_sent) {
                        s->ready_sent = true;
                        notify_ready(s->notify, "reloaded");
                        supervisor_update_status(s);
                }
        }
        if (r < 0) {
                log_error("reload rejected, nothing changed: %s", *ret_error ?: strerror(-r));
                return r;
        }
        if (!dry_run) {
                log_reload_report(*ret_report);
                log_info("reload applied in %s", format_duration(d, sizeof d, now_usec(CLOCK_MONOTONIC) - t0));
        }
        return 0;
}

/* ---- Control methods ---- */

static json_t *supervisor_to_json(Supervisor *s, const ControlPeer *peer) {
        _cleanup_free_ char *degraded = NULL;
        char ts[64], ts2[64];
        usec_t now = now_usec(CLOCK_REALTIME);

        (void) supervisor_degraded(s, peer, &degraded);
        return json_pack("{s:i, s:s, s:I, s:s, s:s, s:f, s:i, s:o, s:o}", "pid", (int) getpid(), "version",
                         PACKAGE_VERSION, "generation", (json_int_t) s->sstate.generation, "boot_id",
                         s->sstate.boot_id, "started_at", format_timestamp(ts, sizeof ts, s->sstate.started_at),
                         "uptime", now > s->sstate.started_at ? (double) (now - s->sstate.started_at) / 1e6 : 0.0,
                         "resumes", (int) s->resumes, "last_resume_at",
                         s->last_resume_at ? json_string(format_timestamp(ts2, sizeof ts2, s->last_resume_at))
                                           : json_null(),
                         "degraded", degraded ? json_string(degraded) : json_null());
}

/* {"supervisor", "contexts"} for the named contexts (NULL or empty: all the peer sees). */
static json_t *status_result(Supervisor *s, json_t *names, const ControlPeer *peer) {
        json_t *list = json_array(), *v;
        size_t i;

        if (names && json_array_size(names) > 0) {
                json_array_foreach(names, i, v) {
                        Context *c = supervisor_find(s, json_string_value(v));
                        if (c)
                                json_array_append_new(list, context_to_json(c));
                }
        } else
                for (i = 0; i < s->n_contexts; i++)
                        if (peer_sees(peer, s->contexts[i]))
                                json_array_append_new(list, context_to_json(s->contexts[i]));
        return json_pack("{s:o, s:o}", "supervisor", supervisor_to_json(s, peer), "contexts", list);
}

/* params.contexts, checked: an array of names of contexts the peer may see.
 * Answers the request with an error and returns -1 when it is not. */
static int request_names(Supervisor *s, ControlRequest *req, json_t *params, json_t **ret) {
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
                c = supervisor_find(s, json_string_value(v));
                /* Another uid's context is answered as a missing one, so no name can be probed. */
                if (!c || !peer_sees(control_request_peer(req), c)) {
                        control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s",
                                              json_string_value(v));
                        return -1;
                }
        }
        *ret = names;
        return 0;
}

static void method_status(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        json_t *names;

        if (request_names(s, req, params, &names) < 0)
                return;
        control_request_reply(req, status_result(s, names, control_request_peer(req)));
}

/* The context named in params, answering the request with an error when
 * there is none or the peer may not touch it. */
static Context *request_context(Supervisor *s, ControlRequest *req, json_t *params) {
        const char *name = json_string_value(json_object_get(params, "context"));
        Context *c;

        if (!name) {
                control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.context must be a context name");
                return NULL;
        }
        c = supervisor_find(s, name);
        /* Another uid's context is answered as a missing one, so no name can be probed. */
        if (!c || !peer_sees(control_request_peer(req), c)) {
                control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s", name);
                return NULL;
        }
        if (s->stopping) {
                control_request_error(req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
                return NULL;
        }
        return c;
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
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        ContextStateKind st;
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        st = context_state(c);
        if (st == CONTEXT_READY || st == CONTEXT_BUSY || st == CONTEXT_UNRESPONSIVE)
                return control_request_reply(req, context_to_json(c));
        log_info("%s: start requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        waiter_add(s, req, c, WAIT_READY, timeout);
        context_start(c);
}

static void method_restart(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        log_info("%s: restart requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        waiter_add(s, req, c, WAIT_READY, timeout);
        context_restart(c);
}

static void method_stop(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        usec_t timeout;

        if (!c || request_timeout(req, params, 60, &timeout) < 0)
                return;
        if (context_state(c) == CONTEXT_STOPPED)
                return control_request_reply(req, context_to_json(c));
        log_info("%s: stop requested by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        waiter_add(s, req, c, WAIT_STOPPED, timeout);
        context_stop(c);
}

/* check: ready, and answering now (a heartbeat round trip after the request). */
static void method_check(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        usec_t timeout;
        Waiter *w;

        if (!c || request_timeout(req, params, 10, &timeout) < 0)
                return;
        w = waiter_add(s, req, c, WAIT_PROBE, timeout);
        if (w)
                waiter_step(s, w);
}

/* wait: every named context (none named: every autostart one the peer sees) ready. */
static void method_wait(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        json_t *names;
        usec_t timeout;
        Waiter *w;

        if (request_timeout(req, params, 60, &timeout) < 0 || request_names(s, req, params, &names) < 0)
                return;
        if (names && json_array_size(names) > 0)
                names = json_incref(names);
        else {
                names = json_array();
                for (size_t i = 0; i < s->n_contexts; i++)
                        if (context_autostart(s->contexts[i]) && peer_sees(control_request_peer(req), s->contexts[i]))
                                json_array_append_new(names, json_string(context_name(s->contexts[i])));
        }
        w = waiter_add(s, req, NULL, WAIT_ALL, timeout);
        if (!w) {
                json_decref(names);
                return;
        }
        w->names = names;
        waiter_step(s, w);
}

/* One cell in flight for a control request. */
typedef struct CellRequest {
        ControlRequest *req;
        ExecCell *cell;
} CellRequest;

static void cell_on_output(void *userdata, const json_t *output) {
        CellRequest *cr = userdata;

        /* A peer that stopped reading loses its stream, not the cell: its reply still comes. */
        (void) control_request_notify(cr->req, "output", json_pack("{s:O}", "output", (json_t *) output));
}

static void cell_on_done(void *userdata, const ExecResult *res) {
        CellRequest *cr = userdata;
        json_t *body =
                json_pack("{s:s, s:o, s:o, s:O}", "status", exec_status_to_string(res->status), "execution_count",
                          res->execution_count >= 0 ? json_integer(res->execution_count) : json_null(), "kernel_id",
                          res->kernel_id ? json_string(res->kernel_id) : json_null(), "outputs",
                          res->outputs ? res->outputs : json_array());

        control_request_set_cancel(cr->req, NULL, NULL);
        if (res->status == EXEC_DIED || res->status == EXEC_ABORTED)
                control_request_error(cr->req, KS_ERR_FAILED, body, "%s",
                                      res->message ?: "the cell did not run to its end");
        else
                control_request_reply(cr->req, body);
        free(cr);
}

/* The client went away mid-cell: the cell is interrupted, so it never blocks the context. */
static void cell_cancel(ControlRequest *req, void *data) {
        CellRequest *cr = data;

        exec_cell_cancel(cr->cell);
        free(cr);
}

static const ExecSink cell_sink = {
        .on_output = cell_on_output,
        .on_done = cell_on_done,
};

static void method_execute(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        const char *code = json_string_value(json_object_get(params, "code"));
        json_t *timeout = json_object_get(params, "timeout");
        usec_t timeout_usec = USEC_INFINITY;
        ContextStateKind st;
        CellRequest *cr;
        int r;

        if (!c)
                return;
        if (!code)
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "params.code must be a string");
        /* A cell's timeout is not clamped: a longer one than asked would surprise. */
        if (timeout && (!json_is_number(timeout) ||
                        protocol_timeout_usec(json_number_value(timeout), PROTOCOL_MAX_TIMEOUT_SEC * USEC_PER_SEC,
                                              &timeout_usec) != 0))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "params.timeout must be a number of seconds greater than 0 and at most "
                                             "%d",
                                             PROTOCOL_MAX_TIMEOUT_SEC);
        st = context_state(c);
        if (st == CONTEXT_STOPPED || st == CONTEXT_FAILED || st == CONTEXT_STOPPING)
                return control_request_error(req, KS_ERR_FAILED, NULL, "context %s is not running (state %s%s%s)",
                                             context_name(c), context_state_to_string(st),
                                             context_last_error(c) ? ": " : "", context_last_error(c) ?: "");
        cr = calloc(1, sizeof *cr);
        if (!cr)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        cr->req = req;
        ExecOptions opt = {
                .timeout = timeout_usec,
                .output_limit = context_config(c)->output_limit,
        };
        r = exec_queue_submit(context_exec(c), code, &opt, &cell_sink, cr, &cr->cell);
        if (r < 0) {
                free(cr);
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot send the cell to the kernel: %s",
                                             strerror(-r));
        }
        control_request_set_cancel(req, cell_cancel, cr);
        /* Its streamed outputs and its reply each hold up to output_limit
         * bytes of text, which JSON may double (newlines, quotes). */
        control_request_allow_queue(req, opt.output_limit > SIZE_MAX / 4 ? SIZE_MAX : 4 * opt.output_limit);
}

static void method_interrupt(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        Context *c = request_context(s, req, params);
        bool any;

        if (!c)
                return;
        any = exec_queue_interrupt(context_exec(c));
        if (any)
                log_info("%s: cell interrupted by uid %u", context_name(c), (unsigned) control_request_peer(req)->uid);
        control_request_reply(req, json_pack("{s:b}", "interrupted", any));
}

/* Changing the configuration is for root and the daemon's own user. */
static bool peer_may_configure(ControlRequest *req) {
        const ControlPeer *peer = control_request_peer(req);

        if (peer->uid == 0 || peer->uid == getuid())
                return true;
        control_request_error(req, KS_ERR_PERMISSION, NULL,
                              "permission denied: only root may change the configuration");
        return false;
}

static void reload_reply(Supervisor *s, ControlRequest *req, bool dry_run) {
        _cleanup_free_ char *error = NULL;
        json_t *report = NULL;
        int r;

        r = supervisor_reload_announced(s, dry_run, &report, &error);
        if (r < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s%s", error ?: strerror(-r),
                                             error ? "" : "; nothing changed");
        control_request_reply(req, report);
}

static void method_reload(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;

        if (!peer_may_configure(req))
                return;
        if (s->stopping)
                return control_request_error(req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
        reload_reply(s, req, json_is_true(json_object_get(params, "dry_run")));
}

/* contexts_dir, opened without following a symlink (created when missing). */
static int open_contexts_dir(Supervisor *s) {
        int r = mkdir_p(s->config->contexts_dir, 0755);

        return r < 0 ? r : open_dir_nofollow(s->config->contexts_dir);
}

/* Whatever add writes must read back exactly: a value the INI format would cut or change is refused, with nothing
 * written. Answers the request and returns false when refused. */
static bool add_value_writable(ControlRequest *req, const char *key, json_t *v) {
        _cleanup_free_ char *shown = NULL;
        const char *reason = NULL;
        int r;

        r = config_value_writable(key, json_string_value(v), json_string_length(v), &reason);
        if (r >= 0)
                return true;
        if (r == -ENOMEM) {
                control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
                return false;
        }
        /* The value as JSON, so a line break or a NUL shows; cut, so a huge one does not flood the reply. */
        shown = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        if (shown && strlen(shown) > 80)
                strcpy(shown + 72, "\"…");
        control_request_error(
                req, RPC_INVALID_PARAMS, NULL,
                "%s = %s cannot be written to an INI file so that it reads back the same: it %s; nothing "
                "was written",
                key, shown ?: "?", reason);
        return false;
}

/* add: writes contexts_dir/NAME.ini and reloads; a reload that fails removes the file again. */
static void method_add(ControlRequest *req, json_t *params, void *userdata) {
        static const char *const keys[] = { "user", "group", "cwd", "connection_file" };
        Supervisor *s = userdata;
        const char *name = json_string_value(json_object_get(params, "context"));
        json_t *env = json_object_get(params, "env"), *v;
        _cleanup_free_ char *text = NULL, *file = NULL, *error = NULL;
        _cleanup_close_ int dirfd = -1;
        size_t len = 0, i;
        FILE *f;
        json_t *report = NULL;
        int r;

        if (!peer_may_configure(req))
                return;
        if (!name || !context_name_valid(name))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "invalid context name: expected [A-Za-z0-9_.-]{1,64}");
        /* contexts_dir ignores hidden files (editors' and our own temporary files start with '.'). */
        if (name[0] == '.')
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "invalid context name %s: a name starting with '.' would be a hidden "
                                             "file, which contexts_dir ignores",
                                             name);
        if (supervisor_find(s, name))
                return control_request_error(req, KS_ERR_FAILED, NULL, "context %s exists already", name);
        if (env && !json_is_array(env))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL, "env must be an array of K=V strings");
        f = open_memstream(&text, &len);
        if (!f)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        fprintf(f, "; written by kernelctl add\n[context:%s]\n", name);
        for (i = 0; i < ELEMENTSOF(keys); i++) {
                json_t *kv = json_object_get(params, keys[i]);
                if (!kv)
                        continue;
                if (!json_is_string(kv)) {
                        fclose(f);
                        return control_request_error(req, RPC_INVALID_PARAMS, NULL, "%s must be a string", keys[i]);
                }
                if (!add_value_writable(req, keys[i], kv)) {
                        fclose(f);
                        return;
                }
                fprintf(f, "%s = %s\n", keys[i], json_string_value(kv));
        }
        json_array_foreach(env, i, v) {
                if (!json_is_string(v) || !strchr(json_string_value(v), '=')) {
                        fclose(f);
                        return control_request_error(req, RPC_INVALID_PARAMS, NULL, "env entries must be K=V strings");
                }
                if (!add_value_writable(req, "env", v)) {
                        fclose(f);
                        return;
                }
                fprintf(f, "env = %s\n", json_string_value(v));
        }
        if (fclose(f) != 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");

        dirfd = open_contexts_dir(s);
        if (dirfd < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot open %s: %s", s->config->contexts_dir,
                                             strerror(-dirfd));
        if (asprintf(&file, "%s.ini", name) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        if (faccessat(dirfd, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s/%s exists already", s->config->contexts_dir,
                                             file);
        r = write_file_atomic_at(dirfd, file, text, len, 0644, (uid_t) -1, (gid_t) -1);
        if (r < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot write %s/%s: %s",
                                             s->config->contexts_dir, file, strerror(-r));
        r = supervisor_reload_announced(s, false, &report, &error);
        if (r < 0) {
                (void) unlinkat(dirfd, file, 0);
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s; %s/%s was not kept", error ?: strerror(-r),
                                             s->config->contexts_dir, file);
        }
        control_request_reply(req, report);
}

/* How long remove waits for the removed context's kernel: its stop ends by stop_timeout (SIGKILL), and kernelctl
 * waits 60 s for the answer. */
static usec_t remove_timeout(const Context *c) {
        usec_t def = context_config(c)->stop_timeout + USEC_PER_SEC;

        return def < 55 * USEC_PER_SEC ? def : 55 * USEC_PER_SEC;
}

/* The answer to remove once the removed context c has stopped (or the timeout says it is still stopping):
 * timeout is the request's, or remove_timeout() when it gave none. */
static void remove_answer(Supervisor *s, ControlRequest *req, usec_t timeout, Context *c, json_t *report) {
        bool stopping = false;
        Waiter *w;

        for (size_t i = 0; i < s->n_retiring; i++)
                if (s->retiring[i] == c)
                        stopping = context_state(c) != CONTEXT_STOPPED;
        if (!stopping)
                return control_request_reply(req, report);
        w = waiter_add(s, req, c, WAIT_REMOVED, timeout ?: remove_timeout(c));
        if (w)
                w->report = report;
        else
                json_decref(report); /* waiter_add answered the request */
}

/* remove: deletes contexts_dir/NAME.ini and reloads; a reload that fails puts the file back. It answers once
 * the context's kernel is gone, so that a script can rely on it. */
static void method_remove(ControlRequest *req, json_t *params, void *userdata) {
        Supervisor *s = userdata;
        const char *name = json_string_value(json_object_get(params, "context"));
        _cleanup_free_ char *path = NULL, *file = NULL, *text = NULL, *error = NULL;
        _cleanup_close_ int dirfd = -1;
        const ContextConfig *cc;
        json_t *report = NULL;
        usec_t timeout;
        size_t len;
        Context *c;
        int r;

        if (!peer_may_configure(req))
                return;
        if (!name || !context_name_valid(name))
                return control_request_error(req, RPC_INVALID_PARAMS, NULL,
                                             "invalid context name: expected [A-Za-z0-9_.-]{1,64}");
        /* A bad timeout is refused before anything is removed; 0 stands for "none given". */
        if (request_timeout(req, params, 0, &timeout) < 0)
                return;
        c = supervisor_find(s, name);
        if (!c)
                return control_request_error(req, KS_ERR_NO_CONTEXT, NULL, "no such context: %s", name);
        cc = context_config(c);
        if (asprintf(&file, "%s.ini", name) < 0 || asprintf(&path, "%s/%s", s->config->contexts_dir, file) < 0)
                return control_request_error(req, RPC_INTERNAL_ERROR, NULL, "out of memory");
        if (!cc->source.file || !streq(cc->source.file, path))
                return control_request_error(req, KS_ERR_FAILED, NULL,
                                             "context %s is defined at %s:%u, not in %s: edit that file", name,
                                             cc->source.file ?: "?", cc->source.line, path);
        r = read_file(path, 1024 * 1024, &text, &len);
        if (r >= 0)
                dirfd = open_contexts_dir(s);
        if (r < 0 || dirfd < 0 || unlinkat(dirfd, file, 0) < 0)
                return control_request_error(req, KS_ERR_FAILED, NULL, "cannot remove %s: %s", path,
                                             strerror(r < 0       ? -r
                                                      : dirfd < 0 ? -dirfd
                                                                  : errno));
        r = supervisor_reload_announced(s, false, &report, &error);
        if (r < 0) {
                (void) write_file_atomic_at(dirfd, file, text, len, 0644, (uid_t) -1, (gid_t) -1);
                return control_request_error(req, KS_ERR_FAILED, NULL, "%s; %s was put back", error ?: strerror(-r),
                                             path);
        }
        remove_answer(s, req, timeout, c, report);
}

static const ControlMethod methods[] = {
        { "reload", method_reload, 0 },       { "add", method_add, 0 },
        { "remove", method_remove, 0 },       { "execute", method_execute, 0 },
        { "interrupt", method_interrupt, 0 }, { "status", method_status, 0 },
        { "check", method_check, 0 },         { "wait", method_wait, 0 },
        { "start", method_start, 0 },         { "stop", method_stop, 0 },
        { "restart", method_restart, 0 },
};

/* ---- Freezes ---- */

/* The tick's period, and how late it may come under load before that counts as a freeze. */
#define TICK_MSEC 1000
#define TICK_SLACK_USEC (1500 * USEC_PER_MSEC)
#define FREEZE_THRESHOLD_USEC (2 * USEC_PER_SEC)

/* Samples the clocks; when a freeze happened since the last sample, records the resume, tells every context
 * to re-arm its deadlines, and returns true (ContextHost.clock_check). */
static bool supervisor_clock_check(void *userdata) {
        Supervisor *s = userdata;
        ClockSample now;
        usec_t jump;
        char d[32];

        clock_sample(&now);
        jump = freeze_detect(&s->clock, &now, TICK_MSEC * USEC_PER_MSEC + TICK_SLACK_USEC, FREEZE_THRESHOLD_USEC);
        s->clock = now;
        if (!jump)
                return false;
        s->resumes++;
        s->last_resume_at = now.realtime;
        log_notice("resumed after a freeze of about %s; deadlines restart from now",
                   format_duration(d, sizeof d, jump));
        for (size_t i = 0; i < s->n_contexts; i++)
                context_resumed(s->contexts[i]);
        return true;
}

static void tick_cb(uv_timer_t *t) {
        (void) supervisor_clock_check(t->data);
}

/* ---- Signals ---- */

/* Reaps every exited child: a kernel through its context (which ends its
 * group first), anything else (orphans we inherit as subreaper or PID 1)
 * directly. WNOWAIT looks before reaping, so a kernel's status is never
 * stolen from its context. */
static void sigchld_cb(uv_signal_t *h, int signum) {
        Supervisor *s = h->data;

        for (;;) {
                siginfo_t si = { 0 };
                bool ours = false;

                if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
                        break;
                ours = preload_child_exited(s->host.preload, si.si_pid);
                for (size_t i = 0; i < s->n_contexts && !ours; i++)
                        ours = context_child_exited(s->contexts[i], si.si_pid);
                if (!ours) {
                        log_debug("reaped orphan %d", (int) si.si_pid);
                        (void) waitpid(si.si_pid, NULL, WNOHANG);
                }
        }
}

static void shutdown_timer_cb(uv_timer_t *t) {
        Supervisor *s = t->data;

        log_error("shutdown is taking too long; killing what is left");
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_pid(s->contexts[i]) > 0)
                        (void) kill(-context_pid(s->contexts[i]), SIGKILL);
        s->exit_code = 1;
}

static void supervisor_shutdown(Supervisor *s, const char *why) {
        usec_t longest = 0;

        if (s->stopping)
                return;
        log_info("%s: stopping every kernel", why);
        s->stopping = true;
        notify_stopping(s->notify);
        for (size_t i = 0; i < s->n_contexts; i++) {
                const ContextConfig *cc = config_find_context(s->config, context_name(s->contexts[i]));
                if (cc && cc->stop_timeout > longest)
                        longest = cc->stop_timeout;
        }
        uv_timer_start(&s->shutdown_timer, shutdown_timer_cb, longest / USEC_PER_MSEC + SHUTDOWN_GRACE_MSEC, 0);
        for (size_t i = 0; i < s->n_contexts; i++)
                context_stop(s->contexts[i]);
        supervisor_check_shutdown(s);
}

/* "pid 1234 (systemd)": who sent a signal, for the log. */
static void describe_sender(pid_t pid, char *buf, size_t size) {
        char path[64];
        _cleanup_free_ char *comm = NULL;

        snprintf(path, sizeof path, "/proc/%d/comm", (int) pid);
        if (pid > 0 && read_file(path, 64, &comm, NULL) >= 0) {
                comm[strcspn(comm, "\n")] = '\0';
                snprintf(buf, size, "pid %d (%s)", (int) pid, comm);
        } else if (pid == 0)
                /* As PID 1 of a container, a sender in the parent namespace has no pid here. */
                snprintf(buf, size, "outside our PID namespace");
        else
                snprintf(buf, size, "pid %d", (int) pid);
}

/* SIGTERM, SIGINT and SIGHUP arrive through a signalfd, which says who sent them. */
static void signalfd_cb(uv_poll_t *h, int status, int events) {
        Supervisor *s = h->data;
        struct signalfd_siginfo si;
        char from[128], why[160];

        while (read(s->signal_fd, &si, sizeof si) == (ssize_t) sizeof si) {
                describe_sender((pid_t) si.ssi_pid, from, sizeof from);
                if (si.ssi_signo == SIGHUP) {
                        _cleanup_free_ char *error = NULL;
                        json_t *report = NULL;
                        if (s->stopping)
                                continue;
                        log_info("SIGHUP from %s: reloading %s", from, s->config->path);
                        if (supervisor_reload_announced(s, false, &report, &error) >= 0)
                                json_decref(report);
                } else {
                        snprintf(why, sizeof why, "%s from %s", si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", from);
                        supervisor_shutdown(s, why);
                }
        }
}

int supervisor_block_signals(void) {
        sigset_t set;

        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        /* Before any thread exists (libzmq's), so every thread inherits the mask. */
        return sigprocmask(SIG_BLOCK, &set, NULL) < 0 ? -errno : 0;
}

/* Every kernel has stopped: close what keeps the loop alive. */
static void supervisor_finish(Supervisor *s) {
        Waiter *w;

        if (s->shutdown_timer.data == NULL)
                return; /* already finishing */
        log_info("all kernels stopped; exiting");
        while ((w = s->waiters)) {
                control_request_set_cancel(w->req, NULL, NULL);
                control_request_error(w->req, KS_ERR_FAILED, NULL, "kernelsupd is shutting down");
                waiter_free(w);
        }
        uv_timer_stop(&s->shutdown_timer);
        uv_close((uv_handle_t *) &s->shutdown_timer, NULL);
        uv_timer_stop(&s->tick);
        uv_close((uv_handle_t *) &s->tick, NULL);
        uv_timer_stop(&s->retire_timer);
        uv_close((uv_handle_t *) &s->retire_timer, NULL);
        uv_timer_stop(&s->state_retry);
        uv_close((uv_handle_t *) &s->state_retry, NULL);
        s->state_retry.data = NULL;
        for (size_t i = 0; i < s->n_contexts; i++)
                if (context_save_error(s->contexts[i]))
                        log_warning("%s: exiting with its state unsaved: %s", context_name(s->contexts[i]),
                                    context_save_error(s->contexts[i]));
        for (size_t i = 0; i < s->n_retiring; i++)
                context_free(s->retiring[i]);
        s->n_retiring = 0;
        s->shutdown_timer.data = NULL;
        if (s->control) {
                control_server_close(s->control);
                s->control = NULL;
        }
        for (size_t i = 0; i < s->n_contexts; i++)
                context_free(s->contexts[i]);
        s->n_contexts = 0;
        preload_pool_free(s->host.preload);
        s->host.preload = NULL;
        uv_close((uv_handle_t *) &s->signal_poll, NULL);
        uv_close((uv_handle_t *) &s->sig_chld, NULL);
        notify_free(s->notify);
        s->notify = NULL;
}

/* ---- Setup ---- */

/* Sets *ret_error to "<fmt with path>: <strerror(r)>" and returns r. */
static int fail(char **ret_error, int r, const char *what, const char *path, const char *hint) {
        char *msg;

        if (asprintf(&msg, "%s %s: %s%s", what, path, strerror(-r), hint ?: "") >= 0)
                *ret_error = msg;
        return r;
}

int supervisor_new(uv_loop_t *loop, Config *config, const ConfigDefaults *defaults, Supervisor **ret,
                   char **ret_error) {
        _cleanup_free_ char *sockdir = NULL, *kdir = NULL, *cdir = NULL;
        Supervisor *s;
        const char *name;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->loop = loop;
        s->config = config;
        s->state_dirfd = -1;
        s->signal_fd = -1;
        s->default_runtime_dir = strdup(defaults->runtime_dir);
        s->default_state_dir = strdup(defaults->state_dir);
        s->default_contexts_dir = strdup(defaults->contexts_dir);
        if (!s->default_runtime_dir || !s->default_state_dir || !s->default_contexts_dir) {
                r = -ENOMEM;
                goto err;
        }
        s->pid1 = getpid() == 1;

        r = mkdir_p(config->state_dir, 0700);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create state_dir", config->state_dir, NULL);
                goto err;
        }
        s->state_dirfd = open_dir_nofollow(config->state_dir);
        if (s->state_dirfd < 0) {
                r = fail(ret_error, s->state_dirfd, "Failed to open state_dir", config->state_dir, NULL);
                goto err;
        }
        r = state_supervisor_start(s->state_dirfd, &s->sstate);
        if (r < 0) {
                char path[4200];
                snprintf(path, sizeof path, "%s/supervisor.json", config->state_dir);
                r = fail(ret_error, r, "Failed to write", path, NULL);
                goto err;
        }
        if (r > 0)
                log_warning("%s/supervisor.json was corrupt; moved aside, generation starts again at 1",
                            config->state_dir);
        log_info("kernelsupd %s starting: generation %llu, boot %s, pid %d%s", PACKAGE_VERSION,
                 (unsigned long long) s->sstate.generation, s->sstate.boot_id, (int) getpid(),
                 s->pid1 ? " (PID 1)" : "");

        /* Kernels' private files live below runtime_dir; published files default below it too. */
        if (asprintf(&kdir, "%s/kernels", config->runtime_dir) < 0 ||
            asprintf(&cdir, "%s/connections", config->runtime_dir) < 0) {
                r = -ENOMEM;
                goto err;
        }
        r = mkdir_p(kdir, 0755);
        if (r >= 0)
                r = mkdir_p(cdir, 0755);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create runtime_dir", config->runtime_dir, NULL);
                goto err;
        }

        s->zmq = zmq_ctx_new();
        if (!s->zmq) {
                r = -errno;
                goto err;
        }
        /* Four sockets per kernel: libzmq's default of 1023 sockets would cap us near 250 contexts. */
        (void) zmq_ctx_set(s->zmq, ZMQ_MAX_SOCKETS, 65535);
        s->host = (ContextHost){
                .loop = loop,
                .zmq = s->zmq,
                .state_dirfd = s->state_dirfd,
                .state_dir = config->state_dir,
                .runtime_dir = config->runtime_dir,
                .port_min = config->port_min,
                .port_max = config->port_max,
                .boot_id = s->sstate.boot_id,
                .userdata = s,
                .clock_check = supervisor_clock_check,
                .state_changed = supervisor_context_changed,
                .heartbeat = supervisor_context_heartbeat,
                .save_changed = supervisor_state_changed,
                .taken_ports = supervisor_taken_ports,
        };
        r = preload_pool_new(loop, getenv("KERNELSUP_PRELOAD_SCRIPT") ?: PKGDATADIR "/kernelsup-preload.py",
                             &s->host.preload);
        if (r < 0)
                goto err;

        s->contexts = calloc(config->n_contexts + 1, sizeof(Context *));
        if (!s->contexts) {
                r = -ENOMEM;
                goto err;
        }
        for (size_t i = 0; i < config->n_contexts; i++) {
                _cleanup_free_ char *warning = NULL;
                r = context_new(&s->host, &config->contexts[i], &s->contexts[i], &warning);
                if (r < 0) {
                        char path[4200];
                        snprintf(path, sizeof path, "%s/contexts/%s.json", config->state_dir,
                                 config->contexts[i].name);
                        r = fail(ret_error, r, "Failed to read", path, NULL);
                        goto err;
                }
                s->n_contexts++;
                if (warning)
                        log_warning("%s: %s", config->contexts[i].name, warning);
        }

        r = path_split(config->socket_path, &sockdir, &name);
        if (r >= 0)
                r = mkdir_p(sockdir, 0755);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to create the directory of socket", config->socket_path, NULL);
                goto err;
        }
        r = control_server_new(loop, config->socket_path, notify_listen_fd(), (gid_t) -1, methods, ELEMENTSOF(methods),
                               s, &s->control);
        if (r < 0) {
                r = fail(ret_error, r, "Failed to listen on", config->socket_path,
                         r == -EADDRINUSE ? " (is another kernelsupd running?)" : NULL);
                goto err;
        }
        r = notify_new(loop, &s->notify);
        if (r < 0)
                goto err;

        {
                sigset_t set;
                sigemptyset(&set);
                sigaddset(&set, SIGTERM);
                sigaddset(&set, SIGINT);
                sigaddset(&set, SIGHUP);
                s->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
                if (s->signal_fd < 0) {
                        r = -errno;
                        goto err;
                }
        }
        uv_poll_init(loop, &s->signal_poll, s->signal_fd);
        uv_signal_init(loop, &s->sig_chld);
        uv_timer_init(loop, &s->shutdown_timer);
        uv_timer_init(loop, &s->tick);
        uv_timer_init(loop, &s->retire_timer);
        s->retire_timer.data = s;
        uv_timer_init(loop, &s->state_retry);
        s->state_retry.data = s;
        s->signal_poll.data = s->sig_chld.data = s->shutdown_timer.data = s->tick.data = s;
        uv_poll_start(&s->signal_poll, UV_READABLE, signalfd_cb);
        uv_signal_start(&s->sig_chld, sigchld_cb, SIGCHLD);

        *ret = s;
        return 0;
err:
        supervisor_free(s);
        return r;
}

int supervisor_run(Supervisor *s) {
        /* Orphans of our kernels (a cell's detached child) come to us, not to init, so they
         * can be reaped and never outlive the daemon unnoticed. PID 1 gets them anyway. */
        if (!s->pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                log_warning_errno(errno, "Failed to become a child subreaper: %m");

        clock_sample(&s->clock);
        uv_timer_start(&s->tick, tick_cb, TICK_MSEC, TICK_MSEC);

        /* Kernels an earlier daemon left running keep their variables: adopt them. */
        for (size_t i = 0; i < s->n_contexts; i++) {
                Context *c = s->contexts[i];
                _cleanup_free_ char *reason = NULL;
                int r = context_adopt(c, &reason);
                if (reason)
                        log_full_errno(r < 0 ? LOG_WARNING : LOG_NOTICE, 0, "%s: %s", context_name(c), reason);
                if (r <= 0 && context_autostart(c))
                        context_start(c);
        }
        supervisor_update_status(s);

        uv_run(s->loop, UV_RUN_DEFAULT);
        return s->exit_code;
}

void supervisor_free(Supervisor *s) {
        if (!s)
                return;
        if (s->control || s->n_contexts > 0) {
                /* Only on a failed setup: the handles were never started. */
                if (s->control)
                        control_server_close(s->control);
                for (size_t i = 0; i < s->n_contexts; i++)
                        context_free(s->contexts[i]);
                uv_run(s->loop, UV_RUN_NOWAIT);
        }
        preload_pool_free(s->host.preload);
        free(s->contexts);
        free(s->retiring);
        free(s->default_runtime_dir);
        free(s->default_state_dir);
        free(s->default_contexts_dir);
        if (s->zmq)
                zmq_ctx_term(s->zmq);
        if (s->state_dirfd >= 0)
                close(s->state_dirfd);
        if (s->signal_fd >= 0)
                close(s->signal_fd);
        config_free(s->config);
        free(s);
}

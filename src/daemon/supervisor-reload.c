/* Applying a reload: the plan from the running contexts to the new config, the contexts it creates, the
 * actions on each, the removed ones retired once stopped, and the reload announced to systemd and logged.
 * The loop, signals and the context table are supervisor.c's; supervisor-private.h is what both share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "handlers.h"
#include "log.h"
#include "notify.h"
#include "reload.h"
#include "supervisor.h"
#include "supervisor-private.h"
#include "util.h"

/* ---- Reload ---- */

/* A removed context has stopped: everything of it on disk goes now (its state and connection files hold its
 * key), before anyone waiting for the removal is answered and before the daemon may exit. Removed and added
 * again meanwhile, the state file belongs to the new context; a connection file another context publishes at
 * the same path now is that one's. */
void retire_forget(Supervisor *s, Context *c) {
        const char *file = context_config(c)->connection_file;
        bool shared = false;
        Context *same = supervisor_find(s, context_name(c));

        /* Inside a reload's apply the table still holds c itself. */
        if (same && same != c)
                return;
        for (size_t i = 0; i < s->n_contexts; i++)
                shared |= s->contexts[i] != c && streq(context_config(s->contexts[i])->connection_file, file);
        (void) context_forget(c, shared);
}

/* Frees the removed contexts that have stopped, with their state, answering whoever still waited on them. */
void retire_cb(uv_timer_t *t) {
        Supervisor *s = t->data;
        size_t keep = 0;

        for (size_t i = 0; i < s->n_retiring; i++) {
                Context *c = s->retiring[i];

                if (context_state(c) != CONTEXT_STOPPED) {
                        s->retiring[keep++] = c;
                        continue;
                }
                handlers_context_removed(s->handlers, c);
                log_info("%s: removed", context_name(c));
                context_free(c);
        }
        s->n_retiring = keep;
        supervisor_check_shutdown(s);
}

/* The plan from the contexts as they are (the settings each runs with, whether it has a kernel) to new. */
static int supervisor_plan(Supervisor *s, const Config *new, ReloadPlan *ret) {
        _cleanup_free_ ContextConfig *now = calloc(s->n_contexts + 1, sizeof(ContextConfig));
        _cleanup_free_ bool *running = calloc(s->n_contexts + 1, sizeof(bool));
        Config old = *s->config;

        if (!now || !running)
                return -ENOMEM;
        /* Shallow copies: a context whose new settings could not be applied kept its old ones. */
        for (size_t i = 0; i < s->n_contexts; i++) {
                now[i] = *context_config(s->contexts[i]);
                running[i] = context_state(s->contexts[i]) != CONTEXT_STOPPED;
        }
        old.contexts = now;
        return reload_plan(&old, running, new, ret);
}

/* Fills table (new's contexts, in its order) with the kept contexts and new ones for the added: all a reload can
 * fail at, done before the first change. On failure the contexts it created are freed again. */
static int reload_create(Supervisor *s, const ReloadPlan *p, const Config *new, Context **table, char **ret_error) {
        for (size_t i = 0; i < p->n_actions; i++) {
                const ReloadAction *a = &p->actions[i];
                _cleanup_free_ char *warning = NULL;
                int r;

                if (a->kind != RELOAD_ADD) {
                        if (a->kind != RELOAD_REMOVE)
                                table[a->new] = s->contexts[a->old];
                        continue;
                }
                r = context_new(&s->host, &new->contexts[a->new], &table[a->new], &warning);
                if (r < 0) {
                        for (size_t k = 0; k < i; k++)
                                if (p->actions[k].kind == RELOAD_ADD)
                                        context_free(table[p->actions[k].new]);
                        if (asprintf(ret_error, "Failed to set up context %s: %s", a->name, strerror(-r)) < 0)
                                *ret_error = NULL;
                        return r;
                }
                if (warning)
                        log_warning("%s: %s", a->name, warning);
        }
        return 0;
}

/* One action on its context c; an added context starts later, once the new table is in place. */
static void reload_apply(Supervisor *s, const ReloadAction *a, Context *c, const ContextConfig *cc) {
        switch (a->kind) {
        case RELOAD_ADD:
                return;
        case RELOAD_REMOVE: {
                /* Stopped, and freed once stopped (retire_cb). */
                bool stopped = context_state(c) == CONTEXT_STOPPED;
                log_info("%s: removed from the configuration; stopping", a->name);
                context_journal_forget(c, "removed");
                s->retiring[s->n_retiring++] = c;
                context_stop(c);
                /* No state change comes from a context stopped already: it is retired now. */
                if (stopped) {
                        retire_forget(s, c);
                        uv_timer_start(&s->retire_timer, retire_cb, 0, 0);
                }
                return;
        }
        default:
                if (context_set_config(c, cc) < 0) {
                        log_error("%s: out of memory applying the new settings", a->name);
                        return;
                }
                if (a->restart) {
                        log_info("%s: settings of its process changed; restarting", a->name);
                        context_journal_forget(c, "process settings changed");
                        context_restart(c);
                } else if (a->start)
                        context_start(c);
        }
}

/* Puts the plan in place and takes *newp as the configuration; nothing has changed when it fails. */
static int supervisor_apply(Supervisor *s, const ReloadPlan *p, Config **newp, char **ret_error) {
        Config *new = *newp;
        Context **table = calloc(new->n_contexts + 1, sizeof(Context *));
        Context **grown = realloc(s->retiring, sizeof(Context *) * (s->n_retiring + s->n_contexts + 1));
        int r;

        if (grown)
                s->retiring = grown;
        if (!table || !grown) {
                free(table);
                return -ENOMEM;
        }
        r = reload_create(s, p, new, table, ret_error);
        if (r < 0) {
                free(table);
                return r;
        }
        for (size_t i = 0; i < p->n_actions; i++) {
                const ReloadAction *a = &p->actions[i];
                if (a->kind == RELOAD_REMOVE)
                        reload_apply(s, a, s->contexts[a->old], NULL);
                else
                        reload_apply(s, a, table[a->new], &new->contexts[a->new]);
        }
        free(s->contexts);
        s->contexts = table;
        s->n_contexts = new->n_contexts;
        s->config->port_min = s->host.port_min = new->port_min;
        s->config->port_max = s->host.port_max = new->port_max;
        /* The directories and the socket's access stay as the daemon started with them (see not_applied). */
        new->socket_mode = s->config->socket_mode;
        new->socket_uid = s->config->socket_uid;
        new->socket_gid = s->config->socket_gid;
        free(new->socket_user);
        free(new->socket_group);
        new->socket_user = TAKE_PTR(s->config->socket_user);
        new->socket_group = TAKE_PTR(s->config->socket_group);
        free(new->socket_path);
        free(new->runtime_dir);
        free(new->state_dir);
        new->socket_path = TAKE_PTR(s->config->socket_path);
        new->runtime_dir = TAKE_PTR(s->config->runtime_dir);
        new->state_dir = TAKE_PTR(s->config->state_dir);
        config_free(s->config);
        s->config = TAKE_PTR(*newp);
        handlers_set_executions_memory(s->handlers, s->config->executions_memory);
        for (size_t i = 0; i < p->n_actions; i++)
                if (p->actions[i].kind == RELOAD_ADD && p->actions[i].start)
                        context_start(table[p->actions[i].new]);
        supervisor_update_status(s);
        return 0;
}

int supervisor_reload(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error) {
        _cleanup_(config_freep) Config *new = NULL;
        _cleanup_(reload_plan_done) ReloadPlan plan = {};
        json_auto_t *report = NULL;
        ConfigDefaults d = {
                .runtime_dir = s->default_runtime_dir,
                .state_dir = s->default_state_dir,
                .contexts_dir = s->default_contexts_dir,
        };
        int r;

        r = config_load(s->config->path, &d, &new, ret_error);
        if (r < 0)
                return r;
        r = supervisor_plan(s, new, &plan);
        if (r < 0)
                return r;
        /* Built first, so that running out of memory for it changes nothing. */
        report = reload_plan_report(&plan);
        if (!report)
                return -ENOMEM;
        if (!dry_run) {
                r = supervisor_apply(s, &plan, &new, ret_error);
                if (r < 0)
                        return r;
        }
        *ret_report = TAKE_PTR(report);
        return 0;
}

/* A reload's report as the log lines kernelctl also prints. */
static void log_reload_report(const json_t *report) {
        _cleanup_(reply_report_done) ReplyReport r = {};

        if (reply_report_decode(report, &r, NULL) < 0)
                return;
        for (size_t i = 0; i < r.n_added; i++)
                log_info("reload: added %s", r.added[i]);
        for (size_t i = 0; i < r.n_restarted; i++)
                log_info("reload: restarted %s (%s)", r.restarted[i].name, r.restarted[i].why);
        for (size_t i = 0; i < r.n_updated; i++)
                log_info("reload: updated %s in place (%s)", r.updated[i].name, r.updated[i].why);
        for (size_t i = 0; i < r.n_removed; i++)
                log_info("reload: removed %s", r.removed[i]);
        for (size_t i = 0; i < r.n_not_applied; i++)
                log_warning("reload: %s", r.not_applied[i]);
        log_info("reload: unchanged %lld", r.unchanged);
}

/* Reload, announced to systemd; logs the outcome. */
int supervisor_reload_announced(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error) {
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
                char what[128];
                snprintf(what, sizeof what, "added=%zu removed=%zu restarted=%zu updated=%zu",
                         json_array_size(json_object_get(*ret_report, "added")),
                         json_array_size(json_object_get(*ret_report, "removed")),
                         json_array_size(json_object_get(*ret_report, "restarted")),
                         json_array_size(json_object_get(*ret_report, "updated")));
                log_event(LOG_INFO, &(LogEvent){ .message_id = LOG_ID_RELOAD_APPLIED, .reason = what },
                          "reload applied in %s (%s)", format_duration(d, sizeof d, now_usec(CLOCK_MONOTONIC) - t0),
                          what);
        }
        return 0;
}

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reload.h"
#include "util.h"

static const char *const reload_kind_table[_RELOAD_KIND_MAX] = {
        [RELOAD_KEEP] = "keep",       [RELOAD_ADD] = "add",       [RELOAD_REMOVE] = "remove",
        [RELOAD_RESTART] = "restart", [RELOAD_UPDATE] = "update",
};

const char *reload_kind_to_string(ReloadKind k) {
        return k >= 0 && k < _RELOAD_KIND_MAX ? reload_kind_table[k] : NULL;
}

/* The index of the context called name in c, or RELOAD_NONE. */
static size_t config_index(const Config *c, const char *name) {
        const ContextConfig *cc = config_find_context(c, name);

        return cc ? (size_t) (cc - c->contexts) : RELOAD_NONE;
}

/* What a context in both configurations needs: a restart, a live update, or nothing. */
static void action_compare(ReloadAction *a, const ContextConfig *was, const ContextConfig *now, bool running) {
        const char *why;

        if ((why = context_config_process_change(was, now))) {
                a->kind = RELOAD_RESTART;
                a->restart = running;
        } else if ((why = context_config_setting_change(was, now)))
                a->kind = RELOAD_UPDATE;
        else
                a->kind = RELOAD_KEEP;
        a->setting = why;
        if (why)
                snprintf(a->reason, sizeof a->reason, "%s changed", why);
        else
                snprintf(a->reason, sizeof a->reason, "no setting changed");
        /* Turning autostart on starts a stopped kernel; turning it off leaves a running one alone. */
        a->start = !running && now->autostart && !was->autostart;
}

/* What only a restart of the daemon can change. */
static int plan_not_applied(const Config *old, const Config *new, ReloadPlan *p) {
        char mode_now[8], mode_wanted[8];
        const struct {
                const char *key, *now, *wanted;
        } fixed[] = {
                { "socket", old->socket_path, new->socket_path },
                { "socket_mode", mode_now, mode_wanted },
                { "socket_user", old->socket_user, new->socket_user },
                { "socket_group", old->socket_group, new->socket_group },
                { "runtime_dir", old->runtime_dir, new->runtime_dir },
                { "state_dir", old->state_dir, new->state_dir },
        };
        size_t n = 0;

        snprintf(mode_now, sizeof mode_now, "%04o", (unsigned) old->socket_mode);
        snprintf(mode_wanted, sizeof mode_wanted, "%04o", (unsigned) new->socket_mode);
        for (size_t i = 0; i < ELEMENTSOF(fixed); i++) {
                char msg[512];
                if (streq_ptr(fixed[i].now, fixed[i].wanted))
                        continue;
                /* An owner no longer set is the daemon's own again. */
                snprintf(msg, sizeof msg, "[supervisor] %s changed to %s: restart kernelsupd to apply it",
                         fixed[i].key, fixed[i].wanted ?: "(unset)");
                if (strv_push(&p->not_applied, &n, strdup(msg)) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int reload_plan(const Config *old, const bool *running, const Config *new, ReloadPlan *ret) {
        ReloadPlan p = {};
        size_t n = 0;

        /* At most every old context removed and every new one added. */
        p.actions = calloc(old->n_contexts + new->n_contexts + 1, sizeof(ReloadAction));
        if (!p.actions || plan_not_applied(old, new, &p) < 0) {
                reload_plan_done(&p);
                return -ENOMEM;
        }
        for (size_t i = 0; i < old->n_contexts; i++)
                if (config_index(new, old->contexts[i].name) == RELOAD_NONE)
                        p.actions[n++] = (ReloadAction){
                                .kind = RELOAD_REMOVE,
                                .name = old->contexts[i].name,
                                .old = i,
                                .new = RELOAD_NONE,
                                .reason = "gone from the configuration",
                        };
        for (size_t i = 0; i < new->n_contexts; i++) {
                const ContextConfig *cc = &new->contexts[i];
                ReloadAction *a = &p.actions[n++];
                size_t was = config_index(old, cc->name);
                if (was == RELOAD_NONE)
                        *a = (ReloadAction){
                                .kind = RELOAD_ADD,
                                .name = cc->name,
                                .old = RELOAD_NONE,
                                .new = i,
                                .reason = "new in the configuration",
                                .start = cc->autostart,
                        };
                else {
                        *a = (ReloadAction){ .name = cc->name, .old = was, .new = i };
                        action_compare(a, &old->contexts[was], cc, running[was]);
                }
        }
        p.n_actions = n;
        *ret = p;
        return 0;
}

void reload_plan_done(ReloadPlan *p) {
        free(p->actions);
        strv_free(p->not_applied);
        *p = (ReloadPlan){};
}

size_t reload_plan_count(const ReloadPlan *p, ReloadKind k) {
        size_t n = 0;

        for (size_t i = 0; i < p->n_actions; i++)
                n += p->actions[i].kind == k;
        return n;
}

json_t *reload_plan_report(const ReloadPlan *p) {
        size_t n = p->n_actions + 1;
        _cleanup_free_ const char **added = calloc(n, sizeof(char *)), **removed = calloc(n, sizeof(char *));
        _cleanup_free_ ReplyChange *restarted = calloc(n, sizeof(ReplyChange)),
                                   *updated = calloc(n, sizeof(ReplyChange));
        ReplyReport r = {
                .added = added,
                .removed = removed,
                .restarted = restarted,
                .updated = updated,
                .unchanged = (long long) reload_plan_count(p, RELOAD_KEEP),
                .not_applied = (const char **) p->not_applied,
                .n_not_applied = strv_length(p->not_applied),
        };
        json_t *j = NULL;

        if (!added || !removed || !restarted || !updated)
                return NULL;
        /* Each list in the order of the plan; KEEP has no list, only the count. */
        for (size_t i = 0; i < p->n_actions; i++) {
                const ReloadAction *a = &p->actions[i];

                if (a->kind == RELOAD_ADD)
                        added[r.n_added++] = a->name;
                else if (a->kind == RELOAD_REMOVE)
                        removed[r.n_removed++] = a->name;
                else if (a->kind == RELOAD_RESTART)
                        restarted[r.n_restarted++] = (ReplyChange){ a->name, a->reason };
                else if (a->kind == RELOAD_UPDATE)
                        updated[r.n_updated++] = (ReplyChange){ a->name, a->setting };
        }
        return reply_report_encode(&r, &j) < 0 ? NULL : j;
}

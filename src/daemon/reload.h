/* A reload as a plan: what the difference between the configuration the daemon runs and the one read again asks
 * of each context, and why. Pure: no loop, no kernel, no I/O; supervisor_reload() applies the plan. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "reply.h"

typedef enum ReloadKind {
        RELOAD_KEEP,    /* no setting changed: given its settings again (their source line may have moved) */
        RELOAD_ADD,     /* new: created, started when autostart */
        RELOAD_REMOVE,  /* not in the configuration any more: stopped, freed once stopped */
        RELOAD_RESTART, /* a setting of its process changed: restarted when running */
        RELOAD_UPDATE,  /* another setting changed: applied to it in place */
        _RELOAD_KIND_MAX,
} ReloadKind;

const char *reload_kind_to_string(ReloadKind k);

/* Where a context has no index: an added one in the old configuration, a removed one in the new. */
#define RELOAD_NONE ((size_t) -1)

typedef struct ReloadAction {
        ReloadKind kind;
        const char *name;    /* borrowed: from the new configuration, for a removed context from the old */
        size_t old, new;     /* its index in old->contexts and in new->contexts, or RELOAD_NONE */
        const char *setting; /* RESTART, UPDATE: the first setting that differs (config.c's name of it) */
        char reason[64];     /* why, for people: "argv changed", "new in the configuration" ... */
        bool start, restart; /* its kernel is started (added with autostart, or autostart turned on while
                              * stopped), or restarted (running while a setting of its process changed) */
} ReloadAction;

typedef struct ReloadPlan {
        /* The removed contexts in the old configuration's order, then every context of the new one in its order
         * (sorted by name): the order they are applied in. */
        ReloadAction *actions;
        size_t n_actions;
        /* Sentences on what only a restart of the daemon changes (socket, runtime_dir, state_dir); strv. */
        char **not_applied;
} ReloadPlan;

/* The plan from old to new; running[i] says whether old->contexts[i] has a kernel now (is not stopped). Both
 * configurations must outlive *ret, which borrows their names. -ENOMEM, else 0. */
int reload_plan(const Config *old, const bool *running, const Config *new, ReloadPlan *ret);

void reload_plan_done(ReloadPlan *p);

/* How many of the plan's actions are of kind k. */
size_t reload_plan_count(const ReloadPlan *p, ReloadKind k);

/* The report kernelctl shows and the daemon logs, a ReplyReport (reply.h) encoded: newly allocated, NULL without
 * memory. */
json_t *reload_plan_report(const ReloadPlan *p);

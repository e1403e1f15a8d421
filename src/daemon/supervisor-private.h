/* Inside the daemon: the state shared by supervisor.c (the loop, signals, the context table,
 * READY/STATUS, shutdown) and supervisor-reload.c (applying a reload). Not for use outside them:
 * everywhere else Supervisor is opaque (supervisor.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "context.h"
#include "control.h"
#include "freeze.h"
#include "handlers.h"
#include "notify.h"
#include "state.h"
#include "supervisor.h"
#include "util.h"

struct Supervisor {
        uv_loop_t *loop;
        Config *config; /* owned */
        int state_dirfd;
        int lock_fd;            /* flock(LOCK_EX) on state_dir/lock: one daemon per state_dir */
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
        Handlers *handlers; /* the control methods, and the requests waiting for a state */

        uv_timer_t tick;       /* samples the clocks to see freezes */
        ClockSample clock;     /* the last sample */
        unsigned resumes;      /* freezes seen since start */
        usec_t last_resume_at; /* CLOCK_REALTIME, 0 when none */
        bool ready_sent;
        bool stopping;
        int exit_code;
};

/* supervisor.c: the context of the table named name, NULL when none; the table owns it. */
Context *supervisor_find(Supervisor *s, const char *name);
/* supervisor.c: STATUS= with the counts and degradations; READY=1 once every autostart context is ready or failed. */
void supervisor_update_status(Supervisor *s);
/* supervisor.c: while stopping, finishes the shutdown once every context, retiring ones included, has stopped. */
void supervisor_check_shutdown(Supervisor *s);

/* supervisor-reload.c: the stopped retiring context c's files go (kept when a context of the table owns them). */
void retire_forget(Supervisor *s, Context *c);
/* supervisor-reload.c: retire_timer's callback (t->data is s): frees the stopped retiring contexts. */
void retire_cb(uv_timer_t *t);
/* supervisor-reload.c: supervisor_reload() announced to systemd (RELOADING=1, then READY=1 whatever the
 * outcome) and logged; same ownership and return as supervisor_reload(). */
int supervisor_reload_announced(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error);

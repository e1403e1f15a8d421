/* The daemon: the loop, signals, the context table, the control methods,
 * READY/STATUS to the service manager, and a clean shutdown. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "context.h"
#include "control.h"
#include "freeze.h"
#include "notify.h"
#include "state.h"

typedef struct Context Context;

typedef struct Supervisor {
        uv_loop_t *loop;
        void *zmq;                /* the one libzmq context */
        Config *config;           /* owned */
        int state_dirfd;
        SupervisorState sstate;   /* generation, boot_id, pid, started_at */
        bool pid1;                /* we are a container's init */
        ContextHost host;         /* what every context is given */

        Context **contexts;       /* sorted by name, as config->contexts */
        size_t n_contexts;
        Context **retiring;       /* removed by a reload, stopping; freed once stopped */
        size_t n_retiring;
        uv_timer_t retire_timer;  /* frees stopped retiring contexts outside their callbacks */
        uv_timer_t state_retry;   /* writes unsaved context state again while any is unsaved */
        /* The directory defaults the config was loaded with, for reloads (owned copies). */
        char *default_runtime_dir, *default_state_dir, *default_contexts_dir;

        ControlServer *control;
        Notify *notify;
        int signal_fd;            /* SIGTERM, SIGINT, SIGHUP, with their sender */
        uv_poll_t signal_poll;
        uv_signal_t sig_chld;
        uv_timer_t shutdown_timer;
        struct Waiter *waiters;   /* control requests waiting for a state */

        uv_timer_t tick;          /* samples the clocks to see freezes */
        ClockSample clock;        /* the last sample */
        unsigned resumes;         /* freezes seen since start */
        usec_t last_resume_at;    /* CLOCK_REALTIME, 0 when none */
        bool ready_sent;
        bool stopping;
        int exit_code;
} Supervisor;

/* Takes config. Opens the state dir, bumps the generation, creates the
 * runtime directories, ends leftover kernels and binds the control socket.
 * *ret_error says what failed, naming the path. */
int supervisor_new(uv_loop_t *loop, Config *config, const ConfigDefaults *defaults, Supervisor **ret,
                   char **ret_error);

/* Reads the config again and applies the difference: new contexts start,
 * removed ones stop, a context whose process settings changed restarts, other
 * setting changes apply in place, the rest is not touched. A config with any
 * error changes nothing (-EINVAL, *ret_error names file and line). *ret_report:
 * {"added": [names], "removed": [names], "restarted": [{"name", "reason"}],
 *  "updated": [{"name", "setting"}], "unchanged": N, "not_applied": [sentences]}. */
int supervisor_reload(Supervisor *s, bool dry_run, json_t **ret_report, char **ret_error);

/* Starts the autostart contexts and runs the loop until a clean shutdown;
 * returns the process exit code. */
int supervisor_run(Supervisor *s);

void supervisor_free(Supervisor *s);

/* Blocks SIGTERM, SIGINT and SIGHUP for a signalfd; call first in main, before any thread starts. */
int supervisor_block_signals(void);

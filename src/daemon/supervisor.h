/* The daemon: the loop, signals, the context table, reload, READY/STATUS to the service manager, and a clean
 * shutdown. The control methods are handlers.c's, given the daemon through a HandlersHost. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"

/* The daemon's state: only supervisor.c and supervisor-reload.c see inside (supervisor-private.h). */
typedef struct Supervisor Supervisor;

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

/* One supervised kernel: its state machine, launch, readiness, restart
 * policy with backoff and start limit (policy.h), and stop escalation. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "connfile.h"
#include "macro.h"
#include "policy.h"
#include "reply.h"
#include "state.h"

typedef struct Context Context;
typedef struct PreloadPool PreloadPool;

/* What a context needs from its owner: the daemon-wide values it works with.
 * Borrowed by every context given it: it, and the strings it points to, must
 * outlive them. The owner may change port_min and port_max between calls (a
 * reload); the rest stays as it was at the first context_new. */
typedef struct ContextHost {
        uv_loop_t *loop;
        int state_dirfd;             /* where contexts/NAME.json is kept */
        const char *state_dir;       /* its path, for messages */
        const char *runtime_dir;     /* below it: kernels/NAME/, and the ipc sockets' directory */
        uint16_t port_min, port_max; /* port_range, for a tcp kernel's ports */
        const char *boot_id;         /* this boot's: a recorded kernel of another boot is not adopted */
        PreloadPool *preload;        /* the preloaded launchers; NULL: every launch is cold */

        /* The callbacks, each given userdata. */
        void *userdata;
        /* Whether the loop was frozen since the last check. The context's
         * deadline callbacks (start_timeout, heartbeat, stop escalation) ask
         * before they act: after a freeze every timer fires at once. When it
         * returns true it has called context_resumed() on every context,
         * this one included (the one re-entry it may make). */
        bool (*clock_check)(void *userdata);
        /* c moved to another state (context_state). Runs from inside
         * context_start, context_stop, context_restart, context_adopt and
         * context_child_exited as well as from the loop. It may read c and
         * call context_probe; it must not start, stop or restart c; once c
         * is stopped it may context_free it (the memory goes after the loop
         * runs the close callbacks, and c does nothing more on this path). */
        void (*state_changed)(void *userdata, Context *c);
        /* c's kernel answered a heartbeat ping (context_hb_answers went up).
         * Runs from the loop; it may read c and call context_probe. */
        void (*heartbeat)(void *userdata, Context *c);
        /* c's state file could not be written, or could again
         * (context_save_error changed). The owner is degraded while any is
         * unsaved and calls context_save_retry. Runs from inside any
         * context_* call that writes the state, context_save_retry included;
         * it may read every context and must not call context_save_retry. */
        void (*save_changed)(void *userdata, Context *c);
        /* The tcp ports every other context holds (context_ports), so that a
         * launch of except never takes them: *ret (newly allocated, owned by
         * the caller) holds *ret_n ports. Runs from inside context_start,
         * context_restart and the loop; it may only read contexts. */
        int (*taken_ports)(void *userdata, const Context *except, uint16_t **ret, size_t *ret_n);
} ContextHost;

/* Creates the context for cfg (copied), loading its persisted state from
 * host->state_dirfd. A corrupt state file is moved aside and the context
 * starts afresh (*ret_warning says so). Does not start anything. */
int context_new(const ContextHost *host, const ContextConfig *cfg, Context **ret, char **ret_warning);

/* Adopts the kernel an earlier daemon of this boot left running: the
 * recorded pid alive with the recorded start time (a reused pid is never
 * touched), leading its own process group, its ports and key known. It is
 * watched through a pidfd and checked with kernel_info; it keeps its
 * kernel_id and incarnation. Returns 1 when adopting, 0 when there was
 * nothing to adopt, and -errno when a process had to be ended instead; a
 * recorded kernel not adopted is logged (the not-adopted event, with a
 * one-word reason). */
int context_adopt(Context *c);

/* A live probe: sends a heartbeat ping now. The kernel answered it once
 * context_hb_answers() exceeds *ret_answers. -ESRCH when not running. */
int context_probe(Context *c, uint64_t *ret_answers);
uint64_t context_hb_answers(const Context *c);

/* The context's cell queue (owned by the context). */
typedef struct ExecQueue ExecQueue;
ExecQueue *context_exec(Context *c);
const ContextConfig *context_config(const Context *c);
/* Replaces the context's settings (copied) in place: for a reload that
 * changes nothing the running process depends on. */
int context_set_config(Context *c, const ContextConfig *cc);
/* Its ports, when it has any yet. */
bool context_ports(const Context *c, uint16_t ret[_CHANNEL_MAX]);
/* Removes everything of a stopped context on disk (a context removed from the config): its persisted state,
 * the kernel's private copy of the connection file and its directories below runtime_dir, and, unless
 * keep_connection_file (another context publishes at the same path now), the published connection file. Each
 * of them holds the key. What cannot be removed is logged; returns the state file's removal result. */
int context_forget(Context *c, bool keep_connection_file);

/* The sandbox was frozen: restart the deadlines from now. */
void context_resumed(Context *c);

void context_start(Context *c);   /* want it running: launch now unless running */
void context_stop(Context *c);    /* want it stopped: shutdown_request, SIGTERM, SIGKILL */
void context_restart(Context *c); /* stop, then launch at once (no backoff) */

/* Frees a stopped context (closes its handles; memory goes after the last
 * close callback). */
void context_free(Context *c);

const char *context_name(const Context *c);
ContextStateKind context_state(const Context *c);
pid_t context_pid(const Context *c);
uid_t context_uid(const Context *c); /* the uid its kernel runs as */
bool context_autostart(const Context *c);
/* Why the context's state is not on disk (a failed write), else its last failure; NULL when neither. */
const char *context_last_error(const Context *c);
/* When context_last_error() was set (CLOCK_REALTIME); 0 with none, or for an error from an older daemon. */
usec_t context_last_error_at(const Context *c);
/* Whether the context is stopping a kernel that asked to go (a client's shutdown_request, a cell's exit() that did
 * not keep it) and a new one follows: a cell may wait for it. */
bool context_comes_back(const Context *c);
/* Why its state is not on disk, NULL when it is; and writing it again (0 when there was nothing to write). */
const char *context_save_error(const Context *c);
int context_save_retry(Context *c);

/* A child the supervisor's SIGCHLD scan saw exit (not yet reaped): when it is
 * this context's kernel, handles the exit (reaping it) and returns true. */
bool context_child_exited(Context *c, pid_t pid);

/* How a kernel ended, as status's last_exit.reason says it. */
typedef enum KernelDeath {
        KERNEL_DEATH_EXIT_CODE,
        KERNEL_DEATH_SIGNAL,
        KERNEL_DEATH_OOM_KILL, /* only when its memory cgroup said so */
        KERNEL_DEATH_UNKNOWN,  /* an adopted kernel, whose status is not ours to read */
        _KERNEL_DEATH_MAX,
} KernelDeath;
const char *kernel_death_to_string(KernelDeath d); /* "exit-code", "signal", "oom-kill", "unknown" */

/* What happened to the context since the daemon made it, for metrics (metrics.c); counters only go up. */
typedef struct ContextCounters {
        uint64_t deaths[_KERNEL_DEATH_MAX]; /* kernels that ended while nobody had asked them to stop */
        uint64_t heartbeat_misses;          /* pings not answered within heartbeat_interval */
} ContextCounters;
const ContextCounters *context_counters(const Context *c); /* borrowed from c */
/* Launches after the first since the daemon first saw the context (persisted; status's restarts). */
unsigned context_restarts(const Context *c);

/* restore = replay (context-replay.c). The kernel is asked to go (a restart, stop or removal asked by a client, a
 * change of process settings): the next one starts empty, and the journal is emptied (why: for the debug log). A
 * stop the daemon makes as it exits is not asked by anyone: the next daemon's kernel replays. */
void context_journal_forget(Context *c, const char *why);
/* Whether the current kernel's namespace rebuilds that of kernel_id, an earlier kernel lost without being asked
 * (check --expect), and with how many cells (-1: unknown, the replay was before the daemon started). */
bool context_rebuilt(const Context *c, const char *kernel_id, long long *ret_cells);

/* A page of the journal as history answers it (ReplyHistory, encoded): up to limit cells from offset (0-based),
 * fewer when their code passes HISTORY_PAGE_BYTES (a longer cell is cut, truncated). -ENODATA with restore = none,
 * -ENOMEM, or a read error. */
#define HISTORY_PAGE_BYTES (1024 * 1024)
int context_history(Context *c, size_t offset, size_t limit, json_t **ret);

/* The context's status as a reply tells it (reply.h); *ret borrows from c until c changes. */
void context_reply(const Context *c, ReplyContext *ret);
/* The same, encoded: a new JSON object, NULL on out of memory. */
json_t *context_to_json(const Context *c);

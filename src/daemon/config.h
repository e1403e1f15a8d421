/* The configuration: the main INI file plus every *.ini in contexts_dir,
 * parsed with inih into a Config. Pure: no I/O beyond reading the files. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "connfile.h"
#include "kernelspec.h"
#include "macro.h"

typedef enum RestartPolicy {
        RESTART_ALWAYS,
        RESTART_ON_FAILURE,
        RESTART_NO,
        _RESTART_POLICY_MAX,
} RestartPolicy;

const char *restart_policy_to_string(RestartPolicy p);
int restart_policy_from_string(const char *s); /* -EINVAL if unknown */

/* Where a setting came from, for error messages: "file:line". */
typedef struct ConfigSource {
        char *file;
        unsigned line;
} ConfigSource;

/* Settings of one context. [defaults] fills these first; [context:NAME] overrides. */
/* Whether a context's kernels are forked by a preloaded launcher (preload.h). */
typedef enum Preload {
        PRELOAD_AUTO, /* for an argv PYTHON -m ipykernel_launcher (or ipykernel) */
        PRELOAD_YES,  /* for any argv PYTHON -m MODULE */
        PRELOAD_NO,
        _PRELOAD_MAX,
} Preload;

const char *preload_to_string(Preload p); /* "auto", "yes", "no"; NULL out of range */

/* What a context's next kernel gets when its kernel was lost without being asked to go (journal.h, replay.h). */
typedef enum Restore {
        RESTORE_NONE,   /* an empty namespace */
        RESTORE_REPLAY, /* the journaled cells that succeeded, run again in order */
        _RESTORE_MAX,
} Restore;

const char *restore_to_string(Restore r); /* "none", "replay"; NULL out of range */

/* transport = auto as parsed, before the loader resolves it: only inside the loader. */
#define TRANSPORT_AUTO ((Transport) _TRANSPORT_MAX)

typedef struct ContextConfig {
        char *name;
        ConfigSource source; /* the [context:NAME] header */
        char **argv;         /* NULL-terminated; may contain {kernel_file} and {name} */
        /* The kernelspec (kernelspec.h) named by `kernel`, or the built-in python3 when neither kernel nor argv
         * is set: NULL when argv alone was given. argv set beside it overrides the spec's. */
        char *kernel;
        char *kernel_path; /* the kernel.json it came from; NULL: the built-in python3, or no kernel */
        /* Why the kernelspec of a context run as a user other than root could not be used, when it lies where
         * that user can write (or is missing there): "FILE:LINE: [context:a] kernel = mine: ...". The context
         * is loaded all the same, and each start of it fails with this (argv then NULL); the rest of the
         * configuration is not affected. NULL: the spec was used. */
        char *kernel_error;
        char *language; /* the spec's; NULL: unknown */
        InterruptMode interrupt_mode;
        RestartPolicy restart;
        char *connection_file;          /* absolute, normalized; default <runtime_dir>/connections/<name>.json */
        bool connection_file_published; /* it lies in <runtime_dir>/connections, the daemon's own directory */
        char *user;                     /* NULL: the daemon's own user */
        char *group;                    /* NULL: the user's primary group */
        char *cwd;                      /* NULL: the user's home, or / */
        char **env;                     /* "K=V", NULL-terminated, in file order; never NULL */
        bool autostart;
        usec_t start_timeout;            /* spawn to kernel_info reply; default 30 s */
        usec_t stop_timeout;             /* shutdown_request/SIGTERM to SIGKILL; default 10 s */
        unsigned start_limit_burst;      /* failed starts ... default 5 */
        usec_t start_limit_interval;     /* ... within this window make it failed; default 60 s */
        usec_t failed_cooldown;          /* failed is retried after this; default 5 min */
        usec_t backoff_min, backoff_max; /* default 100 ms, 30 s */
        usec_t backoff_reset;            /* ready this long resets the backoff; default 10 s */
        usec_t heartbeat_interval;       /* heartbeat ping period while running; default 5 s */
        unsigned heartbeat_misses;       /* this many unanswered pings make it unresponsive; default 3 */
        usec_t unresponsive_restart;     /* restart after unresponsive this long; 0 (default): never */
        size_t output_limit;             /* bytes of output kept per cell; default 10 MiB */
        /* Resource limits of the kernel (0: none), enforced by a systemd scope, a cgroup, or an rlimit. */
        uint64_t memory_max; /* bytes */
        unsigned cpu_quota;  /* percent of one CPU */
        unsigned tasks_max;
        /* ipc: only the context's user and root reach the kernel. Default auto, resolved at load for the kernel's argv
         * (quirks_transport()): never TRANSPORT_AUTO once loaded. */
        Transport transport;
        const char *transport_why; /* static: auto's reason, or that it was set */
        Preload preload;           /* default auto: a preloaded launcher for PYTHON -m ipykernel_launcher */
        /* After shutdown_request, SIGTERM follows this soon (ipykernel now and then ignores the request); SIGKILL
         * still comes at stop_timeout. Default 500 ms. */
        usec_t shutdown_grace;
        /* Patch an IPython kernel's output stream so that a flood reaches iopub in bounded messages (chunking.h);
         * default yes. Applies from the kernel's next start. */
        bool output_chunking;
        /* restore = replay journals the cells of the current kernel in state_dir (at most journal_max bytes) and
         * replays them, within restore_timeout, into a kernel that replaces one lost without being asked. */
        Restore restore;        /* default none */
        size_t journal_max;     /* default 16 MiB */
        usec_t restore_timeout; /* default 10 min */
        /* The executions of the context kept after they ended (execution.h): the last executions_keep (1 to
         * 1000, default 32), each for executions_ttl after its end (default 1 h). */
        unsigned executions_keep;
        usec_t executions_ttl;
        /* Who added the context with kernelctl add: the peer's uid, which add writes as added_by into the file
         * (allowed only in a file of contexts_dir); (uid_t) -1 for a context written by hand. A uid other than
         * root may remove only the contexts it added, and add at most user_contexts_max of them. */
        uid_t added_by;
} ContextConfig;

typedef struct Config {
        char *path; /* the main file */
        char *socket_path;
        /* The socket's mode (default 0666: every uid may connect, and the daemon shows each only its own
         * contexts), and its owner and group by name or number (NULL: the daemon's), resolved at load into
         * socket_uid and socket_gid ((uid_t) -1 and (gid_t) -1 when not set). A socket systemd passes keeps
         * what its unit gave it (SocketMode=, SocketUser=, SocketGroup=). */
        mode_t socket_mode;
        char *socket_user, *socket_group;
        uid_t socket_uid;
        gid_t socket_gid;
        char *runtime_dir;
        char *state_dir;
        char *contexts_dir;
        uint16_t port_min, port_max;
        size_t executions_memory; /* bytes of kept outputs of executions, over the daemon; default 64 MiB */
        /* The contexts each uid other than root and the daemon's may add (kernelctl add) for itself; default 8,
         * 0: such adds are refused. */
        unsigned user_contexts_max;
        /* What a context gets where it sets nothing: the built-in values, then [defaults] (scalars only: its
         * strings are NULL). The limits such an add may set are bounded by these. */
        ContextConfig defaults;
        ContextConfig *contexts; /* sorted by name */
        size_t n_contexts;
} Config;

/* Directory defaults, which main takes from the environment
 * ($RUNTIME_DIRECTORY, $STATE_DIRECTORY, $CONFIGURATION_DIRECTORY under systemd)
 * or from the build's paths. Every field must be set. */
typedef struct ConfigDefaults {
        const char *runtime_dir;
        const char *state_dir;
        const char *contexts_dir;
        const char *socket_path; /* NULL: <runtime_dir>/control.sock */
} ConfigDefaults;

/* Loads path and then every *.ini in the contexts_dir it names (sorted by name;
 * a missing contexts_dir is not an error). On failure returns -EINVAL (or
 * -ENOENT, -ENOMEM, ...) and, when ret_error is not NULL, a sentence that names
 * file, line, key and value, e.g.
 *   "/etc/kernelsup/kernelsup.ini:12: [context:a] restart = sometimes: expected always, on-failure or no".
 * The config is rejected as a whole on the first error. */
int config_load(const char *path, const ConfigDefaults *defaults, Config **ret, char **ret_error);

/* Whether the line "key = value", written into a contexts_dir file (kernelctl add), reads back as exactly value (len
 * bytes: a JSON string may hold a NUL). -EINVAL with *ret_reason when it would not: a NUL or a line break, blanks at
 * either end (trimmed), a ';' after a blank (starts a comment), an empty value, or a line longer than the reader
 * takes. Whether the key's own parser accepts the value is checked when the file is loaded. */
int config_value_writable(const char *key, const char *value, size_t len, const char **ret_reason);

Config *config_free(Config *c);
static inline void config_freep(Config **c) {
        config_free(*c);
}

const ContextConfig *config_find_context(const Config *c, const char *name);

/* The module of an argv `PYTHON -m MODULE ...` with an absolute PYTHON (borrowed from argv), else NULL. */
const char *argv_python_module(char *const *argv);
/* The module cc's kernels are preloaded for (preload.h), or NULL with *ret_why (static) saying why not:
 * preload = no, an argv that is not PYTHON -m MODULE, or with auto another module than ipykernel_launcher
 * or ipykernel. */
const char *context_config_preload_module(const ContextConfig *cc, const char **ret_why);

/* Expands {kernel_file} and {name} in cc->argv. Returns a new NULL-terminated vector. */
int context_config_expand_argv(const ContextConfig *cc, const char *kernel_file, char ***ret);

/* True when the settings that shape the running process differ (argv, user,
 * group, cwd, env, connection_file, transport, limits): a reload must restart the kernel. */
bool context_config_process_differs(const ContextConfig *a, const ContextConfig *b);
/* The first of those settings that differs ("argv", "user", "group", "cwd", "env", "connection_file", "transport",
 * "memory_max", ...), or NULL. */
const char *context_config_process_change(const ContextConfig *a, const ContextConfig *b);
/* The first other setting that differs (restart, timeouts, heartbeat, output_limit, autostart ...), or NULL:
 * those apply to a running kernel without a restart. */
const char *context_config_setting_change(const ContextConfig *a, const ContextConfig *b);

/* A deep copy that outlives its Config (a context owns one), and its free (NULL-safe, returns NULL). */
ContextConfig *context_config_dup(const ContextConfig *cc);
ContextConfig *context_config_free(ContextConfig *cc);

/* Persistent state in state_dir, written atomically (temp + fsync + rename +
 * fsync of the directory) as JSON with jansson:
 *   supervisor.json        {"generation", "boot_id", "pid", "started_at"}
 *   contexts/NAME.json     one ContextState each
 * The (de)serialisation is pure and tested on its own. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "connfile.h"
#include "macro.h"

typedef struct SupervisorState {
        uint64_t generation;
        char boot_id[37];
        pid_t pid;
        usec_t started_at; /* CLOCK_REALTIME */
} SupervisorState;

/* Takes the lock of the state directory: flock(LOCK_EX) on its file "lock"
 * (made 0600 if missing), which then holds our pid. Returns the lock's fd
 * (O_CLOEXEC; the caller keeps it open for the daemon's life and closes it),
 * or -EWOULDBLOCK when another process holds it, with *ret_holder its pid
 * (0 if unknown), or -errno. Nothing else of the directory is touched. */
int state_dir_lock(int state_dirfd, pid_t *ret_holder);

/* Reads supervisor.json (a missing file is generation 0), increments the
 * generation, records boot_id, pid and started_at, and writes it back before
 * returning it. A corrupt file is moved aside to supervisor.json.corrupt and
 * counting starts again from 1; the return value is then 1 (0 otherwise), so
 * the caller can say so. */
int state_supervisor_start(int state_dirfd, SupervisorState *ret);
/* (Corrupt includes a file over 64 KiB. A file that cannot be read for
 * another reason, e.g. a directory or a symlink there, gives -errno and
 * nothing is moved or written. *ret is written only on success.) */

typedef struct ExitInfo {
        bool valid;
        int code;     /* exit status, when signal == 0 */
        int signal;   /* terminating signal, or 0 */
        bool oom;     /* killed by the OOM killer, when the system told */
        bool unknown; /* it ended, but how is not ours to know (an adopted kernel is not our child) */
        usec_t at;    /* CLOCK_REALTIME */
} ExitInfo;

typedef struct ContextState {
        /* Kept across restarts and reboots. */
        ConnectionInfo conn; /* ports and key; conn.ip is not persisted */
        bool has_conn;
        uint64_t incarnation; /* +1 at every launch */
        unsigned restarts;    /* launches after the first, since the daemon first saw it */
        /* The current or last kernel process. */
        char kernel_id[37];     /* "" when never launched */
        pid_t pid;              /* 0 when not running */
        uint64_t pid_starttime; /* /proc/PID/stat field 22, to tell a reused pid */
        char boot_id[37];       /* boot the pid belongs to */
        usec_t started_at;      /* CLOCK_REALTIME, 0 when never */
        bool preloaded;         /* forked by a preloaded launcher rather than started cold */
        ExitInfo last_exit;
        char *last_error;     /* owned; NULL when none */
        usec_t last_error_at; /* CLOCK_REALTIME when last_error was set; 0 with none (or from an older daemon) */
} ContextState;

void context_state_done(ContextState *s); /* frees last_error, zeroes */

/* Pure (de)serialisation. from_json fills *ret only on success; -EBADMSG
 * when a field is missing or has the wrong type or range. */
json_t *context_state_to_json(const ContextState *s);
int context_state_from_json(const json_t *j, ContextState *ret);

/* contexts/NAME.json under state_dirfd (created 0700 if missing).
 * load: -ENOENT when there is none, -EBADMSG when it is corrupt.
 * All three: -EINVAL when context_name_valid(name) is false; a symlink at
 * contexts/ or at the file is never followed (-ELOOP/-ENOTDIR).
 * load: -EFBIG over 64 KiB; *ret is overwritten on success (call
 * context_state_done on it first if it held a state).
 * save: files 0600; -EINVAL for a state load would refuse (out-of-range
 * fields), -EFBIG when the JSON exceeds 64 KiB. A last_error that is not
 * UTF-8 is written with U+FFFD in place of each ill-formed subpart.
 * remove: a missing file or directory is success. */
int context_state_load(int state_dirfd, const char *name, ContextState *ret);
int context_state_save(int state_dirfd, const char *name, const ContextState *s);
int context_state_remove(int state_dirfd, const char *name);

/* Launching a kernel: everything that can take a lock (NSS lookups, malloc)
 * happens in the parent; the child between fork and exec only makes
 * async-signal-safe calls (libzmq's threads make us threaded: doc/design.md, section 4). */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "user.h"

/* Raises our RLIMIT_NOFILE soft limit to the hard limit, remembering the
 * original, which every kernel gets back (select() in a kernel breaks beyond
 * 1024 descriptors). */
void spawn_raise_nofile(void);

/* Resolves user (a name or a numeric uid) and group (name or gid; NULL: the
 * user's primary group) with getpwnam_r/getgrnam_r/getgrouplist. user NULL:
 * the daemon's own identity (change = false) unless group is set. -ESRCH
 * when the user or group does not exist; *ret_error then says which. */
int spawn_user_resolve(const char *user, const char *group, SpawnUser *ret, char **ret_error);
void spawn_user_done(SpawnUser *u);

/* Builds the kernel's environment: the daemon's own minus what only the
 * daemon may use (NOTIFY_SOCKET, WATCHDOG_*, LISTEN_*, JPY_PARENT_PID), USER,
 * LOGNAME, HOME and SHELL for a changed user, then extra ("K=V", later ones
 * win). Returns a new NULL-terminated vector. */
int spawn_env_build(const SpawnUser *u, char *const *extra, char ***ret);

typedef struct SpawnParams {
        char *const *argv; /* argv[0] is an absolute path */
        char *const *env;
        const char *cwd; /* NULL: "/" */
        const SpawnUser *user;
        int stdout_fd; /* the child's stdout and stderr; stdin is /dev/null */
        /* Called in the parent while the child waits just before exec (to record
         * its pid, to place it in a cgroup); may be NULL. A negative errno
         * refuses the launch: the child never execs, and *ret_error (may be
         * left NULL) says why. SPAWN_DEFER: the child goes on waiting, and
         * spawn_kernel() returns with *pending holding what releases it. */
        int (*prepare)(pid_t pid, void *userdata, char **ret_error);
        void *userdata;
        struct SpawnPending *pending; /* where a deferred child's handle goes; needed for SPAWN_DEFER */
        int pass_fd;                  /* > 2: becomes the child's descriptor 3, open across exec; 0: none */
} SpawnParams;

#define SPAWN_DEFER 1

/* A forked child waiting before exec for spawn_release(). Owns both descriptors. */
typedef struct SpawnPending {
        int gofd; /* -1: none */
        int errfd;
        int timeout_msec; /* how long spawn_release() waits for the child's report; -1: until it comes */
        char *exe;        /* for the message: argv[0] and cwd */
        char *cwd;
} SpawnPending;

/* Lets a deferred child exec and waits (as spawn_kernel() does) for the exec to
 * succeed or fail: 0, or the negative errno with *ret_error naming the step
 * (at once 0 when errfd is -1: the report is read elsewhere).
 * The child is not reaped here: it has exited then, and its pidfd says so.
 * Frees the handle either way. */
int spawn_release(SpawnPending *sp, char **ret_error);

/* Drops a deferred child's handle without releasing it: without its byte it
 * exits (127) before exec. No-op on a handle with gofd -1. */
void spawn_pending_drop(SpawnPending *sp);

/* Forks and execs a kernel in its own session and process group, with a
 * pidfd for it taken before anything can reap it. Waits for the exec to
 * succeed or fail (a CLOEXEC pipe reports the child's errno). On an exec
 * failure returns the negative errno and sets *ret_error to a sentence
 * naming the step ("exec /x/python3: No such file or directory"); the child
 * has been reaped then. When prepare refuses, returns its error and its
 * *ret_error, the child killed and reaped before it could exec. */
int spawn_kernel(const SpawnParams *p, pid_t *ret_pid, int *ret_pidfd, char **ret_error);

/* The part of a launch after the child exists, for spawn_kernel() and for a kernel a preloaded launcher
 * forked (preload.c): takes a pidfd for pid (our child, not yet reaped), runs p->prepare, lets the child go
 * through gofd (-1 without prepare) and reads its report on errfd, waiting at most timeout_msec (-1: until it
 * comes; a late child is killed, -ETIMEDOUT). errfd -1: the caller reads the report itself, on its loop.
 * Owns errfd and gofd (closes them, or hands them to *p->pending). Returns as spawn_kernel() does. */
/* The sentence for a child's report of a failed step (two ints: step and errno), as spawn_kernel() gives it
 * ("chdir /x: No such file or directory"); NULL on out of memory. */
char *spawn_report_error(const int report[2], const char *exe, const char *cwd);

int spawn_finish(const SpawnParams *p, pid_t pid, int errfd, int gofd, int timeout_msec, pid_t *ret_pid,
                 int *ret_pidfd, char **ret_error);

/* Writing a client-facing file (a published connection file) at a path that someone other than the daemon chose,
 * with the rights of the user the file is for: the root daemon must never write where that user could not, nor
 * through a symbolic link anyone planted in any component of the path. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "user.h"

/* Writes len bytes of data to the absolute path atomically: a temporary file created with O_EXCL beside it,
 * fchmod to mode, fsync, rename over path (a symbolic link at path is replaced, never followed), fsync of the
 * directory. The work happens in a short-lived child of ours that first takes u's uid, gid and supplementary
 * groups (u NULL or u->change false: the daemon's own identity), so the kernel's own permission checks decide,
 * sticky bits included; the child makes only async-signal-safe calls (libzmq's threads make us threaded), and
 * its result comes back through a pipe. Every component of the directory is resolved without following a
 * symbolic link: openat2(RESOLVE_NO_SYMLINKS), or where the kernel lacks openat2, a walk from / that opens one
 * component at a time with O_NOFOLLOW. A writer that is root (to which the kernel's sticky-bit rule does not
 * apply) replaces a file in a sticky directory only when root owns it. A child that does not finish within
 * 10 s (a hung FUSE mount) is killed.
 *
 * On failure returns -errno and, when ret_reason is not NULL, a newly allocated sentence naming the component
 * and the cause ("/home/a/p is a symbolic link; no component of the path may be one"). Blocks the calling
 * thread for the child's lifetime and reaps it by pid; nothing else must reap that pid meanwhile (a loop's
 * SIGCHLD handler runs only after we return). */
int user_file_write(const char *path, const void *data, size_t len, mode_t mode, const SpawnUser *u,
                    char **ret_reason);

/* Removes the file at the absolute path the same way: in a child with u's identity, the directory resolved
 * without following a symbolic link, root held to the sticky-bit rule. Only a regular file is removed (a link or
 * a directory there is not one the daemon wrote: -EMEDIUMTYPE, left as it is); a missing one is success.
 * Failures as for user_file_write. */
int user_file_remove(const char *path, const SpawnUser *u, char **ret_reason);

/* Whether u may enter the directory at the absolute path, as a kernel of u's does at its start: chdir in a child
 * with u's identity (links followed, as chdir follows them), within the same 10 s. 0 when it may; else -errno and,
 * when ret_reason is not NULL, a newly allocated sentence ("user a cannot enter /root: Permission denied").
 * Blocks and reaps as user_file_write. */
int user_dir_enter(const char *path, const SpawnUser *u, char **ret_reason);

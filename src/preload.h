/* Preloaded launchers (doc/design.md, section 4, "Preloaded kernels"): one Python process per
 * (interpreter, module, user and groups, environment) that has imported what a kernel needs and forks a
 * kernel per launch (src/kernelsup-preload.py). The kernel it forks becomes our child (we are the child
 * subreaper, or PID 1), waits for our word as a cold kernel does, and is watched, placed, recorded and adopted
 * like one. A launch that cannot be preloaded is told why and goes cold. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "spawn.h"

typedef struct PreloadPool PreloadPool;

/* script: the launcher's Python file (copied). Its launchers' handles run on loop. */
int preload_pool_new(uv_loop_t *loop, const char *script, PreloadPool **ret);
/* Ends every launcher (SIGKILL) and frees the pool; the memory of the handles goes in their close
 * callbacks, so the loop must run afterwards. NULL-safe. */
void preload_pool_free(PreloadPool *pool);

/* Launches p (argv `PYTHON -m MODULE ...`, p->prepare set) through the launcher for its interpreter, module,
 * user and environment, starting that launcher when there is none. Returns as spawn_kernel() does, or -EAGAIN
 * when nothing was launched and the caller should launch cold: *ret_cold (owned by the caller) then says why
 * ("the preloaded launcher is starting", "... exited with code 1", ...). Waits for the launcher's answer and for
 * the kernel's setup a bounded time each; a launcher that does not answer in time is ended, and launches go
 * cold until it is started again (at most every 10 s). */
int preload_spawn(PreloadPool *pool, const SpawnParams *p, pid_t *ret_pid, int *ret_pidfd, char **ret_error,
                  char **ret_cold);

/* A child the supervisor's SIGCHLD scan saw exit (not yet reaped): when it is one of the pool's launchers,
 * reaps it, notes why it ended (the next launch through it goes cold and says so) and returns true. */
bool preload_child_exited(PreloadPool *pool, pid_t pid);

/* The launchers' pids, for tests and status: how many are running (starting or ready). */
size_t preload_running(const PreloadPool *pool);

/* Preloaded launchers (doc/design.md, section 4, "Preloaded kernels"): one Python process per
 * (interpreter, module, user and groups, environment) that has imported what a kernel needs and forks a
 * kernel per launch (src/daemon/kernelsup-preload.py). The kernel it forks becomes our child (we are the child
 * subreaper, or PID 1), waits for our word as a cold kernel does, and is watched, placed, recorded and adopted
 * like one. A launch that cannot be preloaded is told why and goes cold. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "spawn.h"

typedef struct PreloadPool PreloadPool;

/* script: the launcher's Python file (copied). Its launchers' handles run on loop. */
int preload_pool_new(uv_loop_t *loop, const char *script, PreloadPool **ret);
/* Ends every launcher (SIGKILL) and frees the pool; the memory of the handles goes in their close
 * callbacks, so the loop must run afterwards. NULL-safe. */
void preload_pool_free(PreloadPool *pool);

/* One launch sent to a launcher, from the request to the kernel's setup report; the pool owns it. */
typedef struct PreloadLaunch PreloadLaunch;

typedef struct PreloadCallbacks {
        /* The launcher answered, or cannot: r = 0, the kernel pid (placed: p->prepare ran, and it was let go or
         * is deferred) with its pidfd (the caller's); r < 0, no kernel, and msg says why (p->prepare refused);
         * r = -EAGAIN, nothing was launched: launch cold with p (valid during the call) and say msg. */
        void (*launched)(PreloadLaunch *pl, void *userdata, int r, pid_t pid, int pidfd, const char *msg,
                         const SpawnParams *p);
        /* After launched(0): the kernel's setup is done (msg NULL) or failed (msg says which step; it exits,
         * and a kernel that did not finish in time is killed). The handle is gone afterwards. */
        void (*setup_done)(PreloadLaunch *pl, void *userdata, const char *msg);
} PreloadCallbacks;

/* Each launcher runs in a cgroup of its own (resources.h), under cc's memory_max, tasks_max and cpu_quota,
 * which are part of its key (contexts with other limits get another launcher); its stdout and stderr reach
 * our log through a relay (logrelay.h) as "launcher UID: ...". That cgroup is ended when the launcher ends
 * or is renewed, at preload_owner_gone() for the last context of its uid, and at preload_pool_free().
 * Asks the launcher for p's interpreter, module, user and environment (argv `PYTHON -m MODULE ...`, p->prepare
 * set) for a kernel, starting that launcher when there is none. Never waits: 0 and *ret_launch when the request
 * is out (cb's answers come on the loop: at most 3 s for the launcher's answer, 3 s for the kernel's setup once
 * it is let go; a launcher that dies or hangs meanwhile sends its waiting launches cold at once, a hung one
 * is ended, and launches go cold until it is started again, at most every 10 s). -EAGAIN when nothing was sent
 * and the caller should launch cold: *ret_cold (owned by the caller) then says why ("the preloaded launcher is
 * still importing", "... exited with code 1", ...). Other negative errnos: out of memory. */
int preload_spawn(PreloadPool *pool, const SpawnParams *p, const ContextConfig *cc, const PreloadCallbacks *cb,
                  void *userdata, PreloadLaunch **ret_launch, char **ret_cold);

/* owner (the userdata of its preload_spawn() calls) runs no kernel any more (stopped, failed or gone): once
 * no owner of its uid is left, that uid's launchers are ended with everything in their cgroups. NULL-safe. */
void preload_owner_gone(PreloadPool *pool, const void *owner);

/* The kernel of pl (handed over, in its setup) has exited: its report is read now, so setup_done() comes
 * before the caller tells of the exit. No-op for one not handed over. */
void preload_launch_settle(PreloadLaunch *pl);

/* The caller is gone (or stopped the launch): cb is not called again. A kernel the launcher forks for it is
 * killed before it runs anything, one already handed over is the caller's. NULL-safe. */
void preload_launch_cancel(PreloadLaunch *pl);

/* A child the supervisor's SIGCHLD scan saw exit (not yet reaped): when it is one of the pool's launchers,
 * reaps it, notes why it ended (the next launch through it goes cold and says so) and returns true. */
bool preload_child_exited(PreloadPool *pool, pid_t pid);

/* The launchers' pids, for tests and status: how many are running (starting or ready). */
size_t preload_running(const PreloadPool *pool);

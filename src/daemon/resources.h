/* resources: the limits of one kernel (memory_max, cpu_quota, tasks_max), put in
 * place while the forked kernel waits before exec, and verified: a limit
 * counts only when the kernel's own cgroup shows it. In order:
 *   1. systemd: a transient scope per kernel (StartTransientUnit over sd-bus,
 *      as `systemd-run --scope` does), asked for without the loop waiting;
 *   2. without systemd (or when its limits are not enforced), as root: a
 *      sub-cgroup of the daemon's own (v1 memory/cpu/pids, or v2);
 *   3. else for memory: RLIMIT_AS, a soft cap (address space, not RSS).
 * status says per context which mechanism applies, or that none does.
 *
 * Every kernel, limits or not, also goes into a cgroup of its own where the
 * system allows (its scope or sub-cgroup, else a sub-cgroup of the daemon's
 * in the v2 hierarchy, else in the v1 freezer), so that what it leaves behind
 * (a cell's process that forked, setsid()s and ignores SIGTERM) is ended with
 * it; where no cgroup is possible, its descendants that the daemon inherited
 * as subreaper are found by the kernel's KERNELSUP_KERNEL_ID. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "reply.h"

typedef enum LimitsMechanism {
        LIMITS_NONE,
        LIMITS_SYSTEMD,
        LIMITS_CGROUP,
        LIMITS_RLIMIT,
} LimitsMechanism;

/* How the processes of a kernel's own cgroup are ended. */
typedef enum GroupKill {
        GROUP_KILL_NONE,   /* no cgroup of its own: the subreaper's search */
        GROUP_KILL_V2,     /* cgroup.kill (cgroup v2, Linux 5.14), else cgroup.procs */
        GROUP_KILL_FREEZE, /* v1 freezer: freeze, SIGKILL each, thaw */
        GROUP_KILL_PROCS,  /* SIGKILL what cgroup.procs lists until it is empty */
} GroupKill;

typedef struct ScopeRequest ScopeRequest;

typedef struct Limits {
        LimitsMechanism mechanism;
        bool memory, cpu, tasks; /* verified in place */
        char *unit;              /* the systemd scope */
        char *dirs[5];           /* sub-cgroups we made, removed at release */
        char *group;             /* a cgroup that holds this kernel and its descendants only; NULL when none */
        GroupKill kill;          /* how group is ended */
        char *oom_path;          /* the kernel's memory cgroup counter (memory.events / memory.oom_control) */
        /* Kept open from launch: systemd removes a scope's cgroup as soon as its last process is gone, so the
         * counter must be read through descriptors taken before. */
        int oom_fd;        /* the counter file */
        int oom_efd;       /* v1: an eventfd the kernel signals at an OOM in that cgroup */
        uint64_t oom_base; /* the count at launch */
        bool oom_known;
        char *note;          /* why a limit is not enforced */
        ScopeRequest *scope; /* while systemd has not yet answered for the scope */
} Limits;

bool resources_wanted(const ContextConfig *cc);

/* Called on the loop once the limits of resources_apply_async() are in place (or known not to be). */
typedef void (*LimitsDone)(Limits *l, void *userdata);

/* Places pid (forked, not yet exec'd) under cc's limits, in a scope or cgroup
 * named kernelsup-NAME-PID: the kernel's pid keeps it apart from any other
 * daemon's kernels in the same cgroup or under the same systemd. Fills *ret
 * (which must stay where it is until done) and returns 0 when all is in
 * place already; returns 1 when systemd was asked for a scope: done(ret,
 * userdata) follows from the loop, never from within this call, once systemd
 * answered and the start job ended, or after 10 s, the fallbacks applied.
 * resources_release() before that cancels it (done is then never called). Never
 * fails the launch: what could not be enforced is said in ret->note. */
int resources_apply_async(uv_loop_t *loop, const ContextConfig *cc, const char *name, pid_t pid, Limits *ret,
                          LimitsDone done, void *userdata);

/* For an adopted kernel: what its cgroups show now, without changing them. */
void resources_inspect(const ContextConfig *cc, pid_t pid, Limits *ret);

/* Whether the OOM killer acted in the kernel's memory cgroup since launch (after its SIGKILL). */
bool resources_oom_killed(const Limits *l);

/* Ends every process the kernel left behind (after the kernel itself has exited): everything in its cgroup, or
 * without one, every descendant of the daemon whose environment holds tag ("KERNELSUP_KERNEL_ID=..."), without
 * blocking the loop. The first round (the kill) runs at once: when nothing is left after it, returns how many
 * processes it ended (0: none), and *ret is untouched. Otherwise returns -EINPROGRESS with *ret set, and the
 * rounds go on every millisecond in the loop until done(r, ...) is called once: r is how many it ended, or
 * -ETIMEDOUT when some were still there after timeout; with how the group was ended and its cgroup (NULL
 * without one; valid during the call). The ending is freed by then. l may be released meanwhile. */
typedef struct LeftoverEnd LeftoverEnd;
typedef void (*LeftoverEndDone)(int r, GroupKill kill, const char *group, void *userdata);
int resources_end_group_start(uv_loop_t *loop, const Limits *l, const char *tag, usec_t timeout, LeftoverEndDone done,
                              void *userdata, LeftoverEnd **ret);
/* Stops an ending in progress without calling done; NULL is fine. */
void resources_end_group_cancel(LeftoverEnd *e);

/* After the kernel has exited: removes the sub-cgroups we made, drops a pending scope request, frees. */
void resources_release(Limits *l);

/* The limits as a status reply tells them (reply.h); *ret borrows strings from cc, l and static tables. */
void resources_reply(const ContextConfig *cc, const Limits *l, ReplyLimits *ret);

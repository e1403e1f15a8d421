/* Ending what a kernel left behind (resources_end_group_start(), declared in resources.h): its cgroup killed
 * (cgroup.kill, the freezer, or cgroup.procs one by one), and where the kernel has no cgroup of its own, the
 * processes that name its kernel id in their environment or descend from it. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "resources.h"
#include "util.h"

/* Between two rounds of an ending that goes on in the loop. */
#define LEFTOVER_ROUND_MSEC 1

/* The state letter, parent and process group of pid from /proc/PID/stat; -ESRCH when it is gone. Without
 * allocating: it runs in a tight loop (see children_kill()). */
static int proc_state(pid_t pid, char *ret_state, pid_t *ret_ppid, pid_t *ret_pgid) {
        char s[1024];
        const char *p;
        int ppid, pgid, r;

        r = proc_pid_stat_read(pid, s, sizeof s, &p);
        if (r == -EIO)
                return r;
        if (r < 0)
                return -ESRCH;
        if (sscanf(p, " %c %d %d", ret_state, &ppid, &pgid) != 3)
                return -EIO;
        *ret_ppid = ppid;
        *ret_pgid = pgid;
        return 0;
}

/* Running, not a zombie: a zombie has closed its sockets already. */
static bool proc_running(pid_t pid) {
        char st;
        pid_t ppid, pgid;

        return proc_state(pid, &st, &ppid, &pgid) >= 0 && st != 'Z';
}

/* SIGKILLs (kill) or counts the running processes that dir/cgroup.procs lists. -errno when unreadable. */
static int group_procs(const char *dir, bool kill_them) {
        _cleanup_free_ char *text = NULL, *path = strjoin(dir, "/cgroup.procs");
        int n = 0, r;

        if (!path)
                return -ENOMEM;
        r = read_file(path, 4 * 1024 * 1024, &text, NULL);
        if (r < 0)
                return r;
        for (char *p = text, *end; *p; p = end) {
                long pid = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (pid > 0 && proc_running((pid_t) pid)) {
                        n++;
                        if (kill_them)
                                (void) kill((pid_t) pid, SIGKILL);
                }
        }
        return n;
}

static int group_write(const char *dir, const char *file, const char *value) {
        char path[4300];

        snprintf(path, sizeof path, "%s/%s", dir, file);
        return write_string_file(path, value);
}

/* v1 freezer: frozen, nothing in the cgroup can fork while each process is killed; thawed, they die. */
/* Whether pid descends from ancestor (through at most 64 parents). */
static bool descends_from(pid_t pid, pid_t ancestor) {
        for (int depth = 0; depth < 64 && pid > 0; depth++) {
                char st;
                pid_t ppid, pgid;
                if (proc_state(pid, &st, &ppid, &pgid) < 0)
                        return false;
                if (ppid == ancestor)
                        return true;
                pid = ppid;
        }
        return false;
}

/* Whether the environment pid started with holds the entry tag ("K=V"). Read in pieces into a buffer on the
 * stack (it runs in a tight loop against a process that forks all the time), at most 1 MiB. */
static bool environ_has(pid_t pid, const char *tag) {
        _cleanup_close_ int fd = -1;
        char path[64], buf[8192], needle[192];
        size_t k = strlen(tag), nlen = k + 2, have = 1, total = 0;

        if (nlen > sizeof needle)
                return false;
        /* "\0K=V\0": entries end in a NUL, and the first one follows a NUL put in front. */
        needle[0] = '\0';
        memcpy(needle + 1, tag, k);
        needle[k + 1] = '\0';
        snprintf(path, sizeof path, "/proc/%d/environ", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        buf[0] = '\0';
        for (;;) {
                ssize_t n = read(fd, buf + have, sizeof buf - have);
                size_t keep;
                if (n <= 0)
                        return false;
                have += (size_t) n;
                total += (size_t) n;
                if (memmem(buf, have, needle, nlen))
                        return true;
                if (total > 1024 * 1024)
                        return false;
                /* A match may straddle two reads: keep what could be its start. */
                keep = have < nlen - 1 ? have : nlen - 1;
                memmove(buf, buf + have - keep, keep);
                have = keep;
        }
}

/* Without a cgroup: what was found of a kernel's leftovers so far. Their process groups are what is killed:
 * a signal to a group reaches every member or stops the fork in progress, so a process that forks and exits
 * all the time (its children keep its group) cannot slip away between two looks at /proc. */
typedef struct Leftovers {
        pid_t pids[64]; /* distinct processes found (to count them) */
        size_t n_pids;
        pid_t groups[64]; /* their process groups */
        size_t n_groups;
} Leftovers;

static bool pid_in(const pid_t *v, size_t n, pid_t pid) {
        for (size_t i = 0; i < n; i++)
                if (v[i] == pid)
                        return true;
        return false;
}

/* SIGKILLs a leftover and its group, and records both. Never our own group, which a kernel's process cannot
 * join (it is in another session). */
static void leftover_kill(Leftovers *lo, pid_t pid) {
        pid_t pg = getpgid(pid);

        (void) kill(pid, SIGKILL);
        if (!pid_in(lo->pids, lo->n_pids, pid) && lo->n_pids < ELEMENTSOF(lo->pids))
                lo->pids[lo->n_pids++] = pid;
        if (pg > 1 && pg != getpgrp() && !pid_in(lo->groups, lo->n_groups, pg) &&
            lo->n_groups < ELEMENTSOF(lo->groups))
                lo->groups[lo->n_groups++] = pg;
}

/* Kills every recorded group again and reaps those members that are our zombies (orphans we inherited; the
 * kernel itself is reaped before, and a kernel of another context leads a group of its own). Returns how
 * many groups still have members. */
static int leftover_groups_kill(const Leftovers *lo) {
        int alive = 0;

        for (size_t i = 0; i < lo->n_groups; i++) {
                siginfo_t si = { 0 };
                if (kill(-lo->groups[i], SIGKILL) < 0)
                        continue;
                while (waitid(P_PGID, (id_t) lo->groups[i], &si, WEXITED | WNOHANG) == 0 && si.si_pid > 0)
                        si = (siginfo_t){ 0 };
                alive += kill(-lo->groups[i], 0) == 0;
        }
        return alive;
}

/* Every running descendant of ours whose environment holds tag. Returns how many. */
static int descendants_kill(const char *tag, Leftovers *lo) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 0 || pid == getpid() || !proc_running((pid_t) pid) ||
                    !descends_from((pid_t) pid, getpid()) || !environ_has((pid_t) pid, tag))
                        continue;
                leftover_kill(lo, (pid_t) pid);
                n++;
        }
        closedir(d);
        return n;
}

/* Our own children whose environment holds tag: where an orphan of the kernel lands first, and much faster
 * to look at than every descendant. Returns how many, -errno without /proc/self/task/N/children. */
static int children_kill(const char *tag, Leftovers *lo) {
        DIR *d = opendir("/proc/self/task");
        struct dirent *de;
        int n = 0, r = -ENOENT;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                _cleanup_free_ char *text = NULL;
                char path[300];
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof path, "/proc/self/task/%s/children", de->d_name);
                if (read_file(path, 1024 * 1024, &text, NULL) < 0)
                        continue;
                r = 0;
                for (char *p = text, *end; *p; p = end) {
                        long pid = strtol(p, &end, 10);
                        char st;
                        pid_t ppid, pgid;
                        if (end == p)
                                break;
                        /* Zombies stay in the list until reaped: skipped at the cost of one read. */
                        if (pid <= 0 || proc_state((pid_t) pid, &st, &ppid, &pgid) < 0 || st == 'Z')
                                continue;
                        if (environ_has((pid_t) pid, tag)) {
                                leftover_kill(lo, (pid_t) pid);
                                n++;
                        }
                }
        }
        closedir(d);
        return r < 0 ? r : n;
}

/* One ending in progress: the state of its rounds. A copy of what it needs from the Limits, which the caller
 * releases meanwhile. */
struct LeftoverEnd {
        GroupKill kill;
        char *group; /* NULL: no cgroup of its own, the subreaper's search for tag */
        char *tag;
        usec_t deadline;
        enum { PHASE_BEGIN, PHASE_FREEZING, PHASE_KILLING } phase;
        int n; /* processes found in the group at the start */
        Leftovers lo;
        unsigned quiet;

        uv_timer_t *timer; /* NULL when synchronous */
        LeftoverEndDone done;
        void *userdata;
};

/* Without a cgroup, as subreaper: one round of looking (our children, then every descendant) and killing.
 * Done once three rounds in a row find nothing and no recorded group has a member left. */
static int subreaper_round(LeftoverEnd *e) {
        int found = children_kill(e->tag, &e->lo);

        if (found <= 0)
                found = descendants_kill(e->tag, &e->lo);
        if (leftover_groups_kill(&e->lo) > 0 || found > 0)
                e->quiet = 0;
        else if (++e->quiet >= 3)
                return (int) e->lo.n_pids;
        return -EAGAIN;
}

static bool frozen(const char *dir) {
        _cleanup_free_ char *st = NULL, *path = strjoin(dir, "/freezer.state");

        return !path || read_file(path, 64, &st, NULL) < 0 || strncmp(st, "FROZEN", 6) == 0;
}

/* With a cgroup: count and kill (cgroup.kill, or freeze then kill each, or kill each), then each round kills
 * again what is left until nothing is. */
static int group_round(LeftoverEnd *e) {
        int r;

        switch (e->phase) {
        case PHASE_BEGIN:
                e->n = group_procs(e->group, false);
                if (e->n <= 0)
                        return e->n == -ENOENT ? 0 : e->n; /* ENOENT: its scope is gone with its last process */
                if (e->kill == GROUP_KILL_FREEZE && group_write(e->group, "freezer.state", "FROZEN") >= 0) {
                        e->phase = PHASE_FREEZING;
                        return -EAGAIN;
                }
                if (e->kill != GROUP_KILL_V2 || group_write(e->group, "cgroup.kill", "1") < 0)
                        (void) group_procs(e->group, true);
                e->phase = PHASE_KILLING;
                return -EAGAIN;
        case PHASE_FREEZING:
                if (!frozen(e->group) && now_usec(CLOCK_MONOTONIC) < e->deadline)
                        return -EAGAIN;
                (void) group_procs(e->group, true);
                (void) group_write(e->group, "freezer.state", "THAWED");
                e->phase = PHASE_KILLING;
                return -EAGAIN;
        case PHASE_KILLING:
        default:
                r = group_procs(e->group, true);
                return r <= 0 ? e->n : -EAGAIN;
        }
}

/* How many processes it ended when done, -EAGAIN while some are left, -ETIMEDOUT past the deadline. */
static int leftover_step(LeftoverEnd *e) {
        int r = e->group ? group_round(e) : subreaper_round(e);

        if (r == -EAGAIN && now_usec(CLOCK_MONOTONIC) >= e->deadline)
                return -ETIMEDOUT;
        return r;
}

static LeftoverEnd *leftover_end_free(LeftoverEnd *e) {
        if (e) {
                free(e->group);
                free(e->tag);
                free(e);
        }
        return NULL;
}
static void leftover_end_freep(LeftoverEnd **e) {
        leftover_end_free(*e);
}

static int leftover_end_new(const Limits *l, const char *tag, usec_t timeout, LeftoverEnd **ret) {
        _cleanup_(leftover_end_freep) LeftoverEnd *e = calloc(1, sizeof *e);

        if (!e)
                return -ENOMEM;
        e->kill = l->kill;
        e->group = l->group ? strdup(l->group) : NULL;
        e->tag = strdup(tag);
        if ((l->group && !e->group) || !e->tag)
                return -ENOMEM;
        e->deadline = now_usec(CLOCK_MONOTONIC) + timeout;
        *ret = TAKE_PTR(e);
        return 0;
}

static void timer_close_cb(uv_handle_t *h) {
        free(h);
}

static void end_finish(LeftoverEnd *e, int r) {
        LeftoverEndDone done = e->done;
        void *userdata = e->userdata;
        GroupKill kill = e->kill;
        _cleanup_free_ char *group = TAKE_PTR(e->group);

        resources_end_group_cancel(e);
        done(r, kill, group, userdata);
}

static void end_timer_cb(uv_timer_t *t) {
        LeftoverEnd *e = t->data;
        int r = leftover_step(e);

        if (r != -EAGAIN)
                end_finish(e, r);
}

int resources_end_group_start(uv_loop_t *loop, const Limits *l, const char *tag, usec_t timeout, LeftoverEndDone done,
                              void *userdata, LeftoverEnd **ret) {
        _cleanup_(leftover_end_freep) LeftoverEnd *e = NULL;
        int r = leftover_end_new(l, tag, timeout, &e);

        if (r < 0)
                return r;
        r = leftover_step(e);
        if (r != -EAGAIN)
                return r;
        e->timer = malloc(sizeof *e->timer);
        if (!e->timer)
                return -ENOMEM;
        (void) uv_timer_init(loop, e->timer);
        e->timer->data = e;
        (void) uv_timer_start(e->timer, end_timer_cb, LEFTOVER_ROUND_MSEC, LEFTOVER_ROUND_MSEC);
        e->done = done;
        e->userdata = userdata;
        *ret = TAKE_PTR(e);
        return -EINPROGRESS;
}

void resources_end_group_cancel(LeftoverEnd *e) {
        if (!e)
                return;
        if (e->timer)
                uv_close((uv_handle_t *) e->timer, timer_close_cb);
        leftover_end_free(e);
}

/* Opens the OOM counter of pid's memory cgroup and, on v1, asks for an eventfd at each OOM there. */

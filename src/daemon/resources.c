#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cgroup.h"
#include "resources.h"
#include "util.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
/* How long systemd may take to answer and start the scope: move the kernel in and write its limits.
 * Milliseconds as a rule; the kernel waits before exec meanwhile (the loop does not), so this bounds how
 * long a systemd that is itself stuck delays a launch before the fallbacks take over. */
#define SCOPE_WAIT_USEC (10 * USEC_PER_SEC)
#define CPU_PERIOD_USEC 100000

bool resources_wanted(const ContextConfig *cc) {
        return cc->memory_max || cc->cpu_quota || cc->tasks_max;
}

_printf_(2, 3) static void note_set(Limits *l, const char *fmt, ...) {
        va_list ap;

        free(l->note);
        va_start(ap, fmt);
        if (vasprintf(&l->note, fmt, ap) < 0)
                l->note = NULL;
        va_end(ap);
}

static bool is_fs(const char *path, unsigned long magic) {
        struct statfs sf;

        return statfs(path, &sf) == 0 && (unsigned long) sf.f_type == magic;
}

/* The directory of a v1 controller's hierarchy: "cpu" may be mounted as "cpu,cpuacct". */
static const char *v1_mount(const char *controller) {
        static char buf[64];

        snprintf(buf, sizeof buf, CGROUP_ROOT "/%s", controller);
        if (is_fs(buf, CGROUP_SUPER_MAGIC))
                return buf;
        if (streq(controller, "cpu")) {
                snprintf(buf, sizeof buf, CGROUP_ROOT "/cpu,cpuacct");
                if (is_fs(buf, CGROUP_SUPER_MAGIC))
                        return buf;
        }
        return NULL;
}

/* Whether CGROUP_ROOT is cgroup v2 itself. On a hybrid host it is a tmpfs of mount points (v2 sits at
 * unified/, without controllers), and a directory made there would be no cgroup at all. */
static bool v2_root(void) {
        return is_fs(CGROUP_ROOT, CGROUP2_SUPER_MAGIC);
}

static int read_u64(const char *path, uint64_t *ret) {
        _cleanup_free_ char *s = NULL;
        int r = read_file(path, 256, &s, NULL);

        if (r < 0)
                return r;
        if (strncmp(s, "max", 3) == 0) {
                *ret = UINT64_MAX;
                return 0;
        }
        return sscanf(s, "%" SCNu64, ret) == 1 ? 0 : -EBADMSG;
}

/* Whether pid's own cgroups show each wanted limit. */
static void limits_verify(const ContextConfig *cc, pid_t pid, Limits *l) {
        _cleanup_free_ char *v2 = cgroup_pid_path(pid, NULL);
        char path[4200];
        uint64_t v;

        l->memory = l->cpu = l->tasks = false;
        if (cc->memory_max) {
                _cleanup_free_ char *m = cgroup_pid_path(pid, "memory");
                const char *mnt = v1_mount("memory");
                /* v1 rounds the limit down to whole pages. */
                if (m && mnt && (snprintf(path, sizeof path, "%s%s/memory.limit_in_bytes", mnt, m), true) &&
                    read_u64(path, &v) >= 0 && v <= cc->memory_max && v + 65536 > cc->memory_max)
                        l->memory = true;
                else if (v2 && (snprintf(path, sizeof path, CGROUP_ROOT "%s/memory.max", v2), true) &&
                         read_u64(path, &v) >= 0 && v <= cc->memory_max && v + 65536 > cc->memory_max)
                        l->memory = true;
        }
        if (cc->tasks_max) {
                _cleanup_free_ char *m = cgroup_pid_path(pid, "pids");
                const char *mnt = v1_mount("pids");
                if (m && mnt && (snprintf(path, sizeof path, "%s%s/pids.max", mnt, m), true) &&
                    read_u64(path, &v) >= 0 && v == cc->tasks_max)
                        l->tasks = true;
                else if (v2 && (snprintf(path, sizeof path, CGROUP_ROOT "%s/pids.max", v2), true) &&
                         read_u64(path, &v) >= 0 && v == cc->tasks_max)
                        l->tasks = true;
        }
        if (cc->cpu_quota) {
                _cleanup_free_ char *m = cgroup_pid_path(pid, "cpu");
                const char *mnt = v1_mount("cpu");
                _cleanup_free_ char *s = NULL;
                if (m && mnt && (snprintf(path, sizeof path, "%s%s/cpu.cfs_quota_us", mnt, m), true) &&
                    read_u64(path, &v) >= 0 && v != UINT64_MAX && v > 0)
                        l->cpu = true;
                else if (v2 && (snprintf(path, sizeof path, CGROUP_ROOT "%s/cpu.max", v2), true) &&
                         read_file(path, 256, &s, NULL) >= 0 && strncmp(s, "max", 3) != 0)
                        l->cpu = true;
        }
}

static bool limits_all(const ContextConfig *cc, const Limits *l) {
        return (!cc->memory_max || l->memory) && (!cc->cpu_quota || l->cpu) && (!cc->tasks_max || l->tasks);
}

/* ---- systemd: a transient scope, asked for without waiting ---- */

/* One StartTransientUnit request on a bus of its own, attached to the loop as sd-event attaches one: a
 * poll on the bus's descriptor for sd_bus_get_events(), a timer for sd_bus_get_timeout(), and
 * sd_bus_process() until it has nothing left to do. The scope's start job is finished once the kernel is
 * in the scope in every hierarchy and the limits are written: systemd moves the pid into name=systemd
 * first and the v1 controllers after, so seeing it in one hierarchy says nothing of the others. Hence
 * the wait for JobRemoved, as systemd-run does. */
struct ScopeRequest {
        sd_bus *bus;
        sd_bus_slot *match, *call;
        uv_poll_t *poll;   /* freed by its close callback */
        uv_timer_t *timer; /* the bus's own timeouts and our deadline; freed by its close callback */
        usec_t deadline;   /* CLOCK_MONOTONIC: the reply and the job together */
        char *job;         /* the start job's path, once systemd answered */
        bool finished;
        bool flush; /* a Job.Cancel is queued: write it before closing */
        int result; /* once finished: 0, or -errno with limits->note set */
        /* The launch this is part of. */
        ContextConfig want; /* only the limits (cc may be replaced by a reload meanwhile) */
        char *name;
        char *unit;
        pid_t pid;
        Limits *limits;
        LimitsDone done;
        void *userdata;
};

static void scope_finish(ScopeRequest *q, int r) {
        if (q->finished)
                return;
        q->finished = true;
        q->result = r;
}

static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        ScopeRequest *q = userdata;
        const char *path, *unit, *result;
        uint32_t id;

        (void) error;
        /* systemd answers StartTransientUnit before it runs the job, so the path is known by now. */
        if (!q->job || sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0 || !streq(path, q->job))
                return 0;
        if (streq(result, "done"))
                scope_finish(q, 0);
        else {
                note_set(q->limits, "the start job of %s ended: %s", q->unit, result);
                scope_finish(q, -EIO);
        }
        return 0;
}

static int on_scope_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        ScopeRequest *q = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(m);
        const char *path;
        int r;

        (void) error;
        if (e) {
                note_set(q->limits, "systemd refused the scope: %s", e->message ?: e->name);
                scope_finish(q, -sd_bus_error_get_errno(e) ?: -EIO);
                return 0;
        }
        r = sd_bus_message_read(m, "o", &path);
        if (r >= 0 && !(q->job = strdup(path)))
                r = -ENOMEM;
        if (r < 0) {
                note_set(q->limits, "systemd refused the scope: %s", strerror(-r));
                scope_finish(q, r);
        }
        return 0;
}

static int scope_message(ScopeRequest *q, sd_bus_message **ret) {
        _cleanup_free_ char *desc = NULL;
        const ContextConfig *cc = &q->want;
        sd_bus_message *m = NULL;
        int r;

        if (asprintf(&desc, "kernelsup kernel of context %s", q->name) < 0)
                return -ENOMEM;
        r = sd_bus_message_new_method_call(q->bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                           "org.freedesktop.systemd1.Manager", "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", q->unit, "fail");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "(sv)");
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)(sv)(sv)", "PIDs", "au", 1, (uint32_t) q->pid, "Description", "s",
                                          desc, "CollectMode", "s", "inactive-or-failed");
        if (r >= 0 && cc->memory_max)
                r = sd_bus_message_append(m, "(sv)", "MemoryMax", "t", (uint64_t) cc->memory_max);
        if (r >= 0 && cc->cpu_quota)
                r = sd_bus_message_append(m, "(sv)", "CPUQuotaPerSecUSec", "t",
                                          (uint64_t) cc->cpu_quota * USEC_PER_SEC / 100);
        if (r >= 0 && cc->tasks_max)
                r = sd_bus_message_append(m, "(sv)", "TasksMax", "t", (uint64_t) cc->tasks_max);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        *ret = m;
        return 0;
}

static void scope_complete(ScopeRequest *q);
static void scope_poll_cb(uv_poll_t *h, int status, int events);
static void scope_timer_cb(uv_timer_t *h);

/* Runs the bus until it has nothing to do, then waits for what it asks for next. Completion is reported
 * from here, outside sd_bus_process(): done may free the request and its bus. */
static void scope_dispatch(ScopeRequest *q) {
        uint64_t until = UINT64_MAX;
        int r = 0, events;

        while (!q->finished && (r = sd_bus_process(q->bus, NULL)) > 0)
                ;
        if (!q->finished && r < 0) {
                note_set(q->limits, "waiting for %s: %s", q->unit, strerror(-r));
                scope_finish(q, r);
        }
        if (!q->finished && now_usec(CLOCK_MONOTONIC) >= q->deadline) {
                note_set(q->limits, "the start job of %s did not finish in %llu ms", q->unit,
                         (unsigned long long) (SCOPE_WAIT_USEC / 1000));
                /* Or systemd would move the kernel into the scope later, out of a fallback's cgroups. Sent
                 * without waiting for the answer; the bus is flushed as it closes. */
                if (q->job)
                        q->flush = sd_bus_call_method_async(q->bus, NULL, "org.freedesktop.systemd1", q->job,
                                                            "org.freedesktop.systemd1.Job", "Cancel", NULL, NULL,
                                                            NULL) >= 0;
                scope_finish(q, -ETIMEDOUT);
        }
        if (q->finished)
                return scope_complete(q);
        events = sd_bus_get_events(q->bus);
        uv_poll_start(q->poll, (events & POLLIN ? UV_READABLE : 0) | (events & POLLOUT ? UV_WRITABLE : 0),
                      scope_poll_cb);
        if (sd_bus_get_timeout(q->bus, &until) < 0 || until > q->deadline)
                until = q->deadline;
        {
                usec_t now = now_usec(CLOCK_MONOTONIC);
                uv_timer_start(q->timer, scope_timer_cb, until > now ? (until - now + 999) / 1000 : 0, 0);
        }
}

static void scope_poll_cb(uv_poll_t *h, int status, int events) {
        (void) status;
        (void) events;
        scope_dispatch(h->data);
}

static void scope_timer_cb(uv_timer_t *h) {
        scope_dispatch(h->data);
}

static void handle_free_cb(uv_handle_t *h) {
        free(h);
}

static void scope_free(ScopeRequest *q) {
        if (!q)
                return;
        sd_bus_slot_unref(q->call);
        sd_bus_slot_unref(q->match);
        /* Without a flush otherwise: a bus that never finished connecting would make it wait. */
        if (q->flush)
                sd_bus_flush_close_unref(q->bus);
        else
                sd_bus_close_unref(q->bus);
        if (q->poll)
                uv_close((uv_handle_t *) q->poll, handle_free_cb);
        if (q->timer)
                uv_close((uv_handle_t *) q->timer, handle_free_cb);
        free(q->job);
        free(q->name);
        free(q->unit);
        free(q);
}

/* Asks systemd for kernelsup-NAME-PID.scope holding pid with cc's limits. 0: asked, *ret reports to
 * scope_complete(); -errno: not asked (no systemd, no bus), l->note may say why. */
static int scope_request(uv_loop_t *loop, const ContextConfig *cc, const char *name, pid_t pid, Limits *l,
                         ScopeRequest **ret) {
        ScopeRequest *q;
        sd_bus_message *m = NULL;
        int r;

        if (sd_booted() <= 0)
                return -ENOMEDIUM;
        q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->want = (ContextConfig){ .memory_max = cc->memory_max,
                                   .cpu_quota = cc->cpu_quota,
                                   .tasks_max = cc->tasks_max };
        q->pid = pid;
        q->limits = l;
        q->deadline = now_usec(CLOCK_MONOTONIC) + SCOPE_WAIT_USEC;
        q->poll = malloc(sizeof *q->poll);
        q->timer = malloc(sizeof *q->timer);
        r = -ENOMEM;
        if (!q->poll || !q->timer || !(q->name = strdup(name)) ||
            asprintf(&q->unit, "kernelsup-%s-%d.scope", name, (int) pid) < 0) {
                free(q->poll), free(q->timer);
                q->poll = NULL, q->timer = NULL, q->unit = NULL;
                goto fail;
        }
        uv_timer_init(loop, q->timer);
        q->timer->data = q;
        r = sd_bus_open_system(&q->bus);
        if (r >= 0 && (r = uv_poll_init(loop, q->poll, sd_bus_get_fd(q->bus))) < 0) {
                free(q->poll);
                q->poll = NULL;
                r = -EBADF;
        }
        if (r >= 0)
                r = sd_bus_match_signal_async(q->bus, &q->match, "org.freedesktop.systemd1",
                                              "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
                                              "JobRemoved", on_job_removed, NULL, q);
        if (r >= 0)
                r = scope_message(q, &m);
        if (r >= 0)
                r = sd_bus_call_async(q->bus, &q->call, m, on_scope_reply, q, SCOPE_WAIT_USEC);
        sd_bus_message_unref(m);
        if (r < 0) {
                note_set(l, "systemd refused the scope: %s", strerror(-r));
                goto fail;
        }
        /* The first round runs from the loop: done is never called from within resources_apply_async(). */
        q->poll->data = q;
        uv_timer_start(q->timer, scope_timer_cb, 0, 0);
        *ret = q;
        return 0;
fail:
        scope_free(q);
        return r;
}

/* ---- Without systemd: a sub-cgroup of our own ---- */

/* Makes <mount><own path>/kernelsup-<name>-<pid>, writes file = value, moves pid in. A directory left by
 * an earlier kernel of that pid (an orphan of it lived on) is taken over. */
static int cgroup_place(const char *mount, const char *own, const char *name, const char *const files[][2],
                        size_t n_files, pid_t pid, char **ret_dir) {
        _cleanup_free_ char *dir = NULL;
        char path[4300], pidstr[32];
        int r;

        bool made;

        if (asprintf(&dir, "%s%s%skernelsup-%s-%d", mount, own, streq(own, "/") ? "" : "/", name, (int) pid) < 0)
                return -ENOMEM;
        made = mkdir(dir, 0755) == 0;
        if (!made && errno != EEXIST)
                return -errno;
        r = 0;
        for (size_t i = 0; i < n_files && r >= 0; i++) {
                snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
                r = write_string_file(path, files[i][1]);
        }
        if (r >= 0) {
                snprintf(path, sizeof path, "%s/cgroup.procs", dir);
                snprintf(pidstr, sizeof pidstr, "%d", (int) pid);
                r = write_string_file(path, pidstr);
        }
        if (r < 0) {
                if (made)
                        (void) rmdir(dir);
                return r;
        }
        *ret_dir = TAKE_PTR(dir);
        return 0;
}

static int apply_cgroup(const ContextConfig *cc, const char *name, pid_t pid, Limits *l) {
        char mem[32], tasks[32], quota[32], period[32], v2cpu[64];
        int n_dirs = 0, r = -ENOENT, placed = 0;
        const char *mnt;

        snprintf(mem, sizeof mem, "%" PRIu64, cc->memory_max);
        snprintf(tasks, sizeof tasks, "%u", cc->tasks_max);
        snprintf(quota, sizeof quota, "%llu", (unsigned long long) cc->cpu_quota * CPU_PERIOD_USEC / 100);
        snprintf(period, sizeof period, "%d", CPU_PERIOD_USEC);
        snprintf(v2cpu, sizeof v2cpu, "%s %s", quota, period);

        /* cgroup v1, one hierarchy per controller (these machines bind memory, pids and cpu to v1). */
        const struct {
                const char *controller;
                bool want;
                const char *files[2][2];
                size_t n;
        } v1[] = {
                { "memory", cc->memory_max != 0, { { "memory.limit_in_bytes", mem } }, 1 },
                { "pids", cc->tasks_max != 0, { { "pids.max", tasks } }, 1 },
                { "cpu", cc->cpu_quota != 0, { { "cpu.cfs_period_us", period }, { "cpu.cfs_quota_us", quota } }, 2 },
        };
        for (size_t i = 0; i < ELEMENTSOF(v1); i++) {
                _cleanup_free_ char *own = NULL;
                if (!v1[i].want || !(mnt = v1_mount(v1[i].controller)) ||
                    !(own = cgroup_pid_path(getpid(), v1[i].controller)))
                        continue;
                r = cgroup_place(mnt, own, name, v1[i].files, v1[i].n, pid, &l->dirs[n_dirs]);
                if (r >= 0) {
                        n_dirs++;
                        placed++;
                }
        }
        if (placed == 0 && v2_root()) {
                /* cgroup v2: one directory, the controllers must be enabled below our own cgroup. */
                _cleanup_free_ char *own = cgroup_pid_path(getpid(), NULL);
                const char *files[3][2];
                size_t n = 0;
                if (cc->memory_max)
                        files[n][0] = "memory.max", files[n++][1] = mem;
                if (cc->tasks_max)
                        files[n][0] = "pids.max", files[n++][1] = tasks;
                if (cc->cpu_quota)
                        files[n][0] = "cpu.max", files[n++][1] = v2cpu;
                if (own)
                        r = cgroup_place(CGROUP_ROOT, own, name, files, n, pid, &l->dirs[n_dirs]);
                if (own && r >= 0)
                        n_dirs++, placed++;
        }
        if (placed == 0) {
                note_set(l, "no cgroup of ours could take the limits (%s)%s", strerror(-r),
                         getuid() != 0 ? "; not root" : "");
                return r;
        }
        l->mechanism = LIMITS_CGROUP;
        return 0;
}

/* ---- A cgroup of its own for every kernel ---- */

/* Where the v2 hierarchy is mounted: /sys/fs/cgroup itself, or unified/ on a hybrid host (no controllers
 * there, but a cgroup all the same, with cgroup.kill). NULL when there is none. */
static const char *v2_mount(void) {
        if (v2_root())
                return CGROUP_ROOT;
        if (is_fs(CGROUP_ROOT "/unified", CGROUP2_SUPER_MAGIC))
                return CGROUP_ROOT "/unified";
        return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);

        return n >= k && streq(s + n - k, suffix);
}

/* Whether a cgroup path is the kernel's own: our kernelsup-NAME-PID or systemd's kernelsup-NAME-PID.scope. */
static bool own_group(const char *path, pid_t pid) {
        const char *last = strrchr(path, '/');
        char suffix[48];

        if (!last || strncmp(last + 1, "kernelsup-", strlen("kernelsup-")) != 0)
                return false;
        snprintf(suffix, sizeof suffix, "-%d", (int) pid);
        if (ends_with(last + 1, suffix))
                return true;
        snprintf(suffix, sizeof suffix, "-%d.scope", (int) pid);
        return ends_with(last + 1, suffix);
}

static void dirs_add(Limits *l, char *dir) {
        for (size_t i = 0; i < ELEMENTSOF(l->dirs); i++)
                if (!l->dirs[i]) {
                        l->dirs[i] = dir;
                        return;
                }
        free(dir);
}

static void group_set(Limits *l, char *dir, GroupKill kill) {
        free(l->group);
        l->group = dir;
        l->kill = dir ? kill : GROUP_KILL_NONE;
}

/* Whether pid's cgroup in the hierarchy at mnt (controller as cgroup_pid_path() takes it) is its own; then
 * that is l->group. */
static bool group_try(pid_t pid, const char *mnt, const char *controller, GroupKill kill, Limits *l) {
        _cleanup_free_ char *path = mnt ? cgroup_pid_path(pid, controller) : NULL;

        if (!path || !own_group(path, pid))
                return false;
        group_set(l, strjoin(mnt, path), kill);
        return l->group;
}

/* The cgroup of its own that pid is in already (a scope, a sub-cgroup for limits, one an earlier daemon
 * made): v2 first, then (unless v2_only) the v1 freezer, then a v1 hierarchy of the limits. */
static bool group_find(pid_t pid, Limits *l, bool v2_only) {
        static const char *const v1[] = { "pids", "memory", "cpu" };

        if (group_try(pid, v2_mount(), NULL, GROUP_KILL_V2, l))
                return true;
        if (v2_only)
                return false;
        if (group_try(pid, v1_mount("freezer"), "freezer", GROUP_KILL_FREEZE, l))
                return true;
        for (size_t i = 0; i < ELEMENTSOF(v1); i++)
                if (group_try(pid, v1_mount(v1[i]), v1[i], GROUP_KILL_PROCS, l))
                        return true;
        return group_try(pid, is_fs(CGROUP_ROOT "/systemd", CGROUP_SUPER_MAGIC) ? CGROUP_ROOT "/systemd" : NULL,
                         "name=systemd", GROUP_KILL_PROCS, l);
}

/* Puts pid (forked, not yet exec'd) in a cgroup of its own unless its limits did in v2: a sub-cgroup of
 * the daemon's in the v2 hierarchy, else in the v1 freezer, else the v1 sub-cgroup of its limits. Leaves
 * l->group NULL when none is possible. */
static void group_place(const char *name, pid_t pid, Limits *l) {
        static const struct {
                bool v2;
                GroupKill kill;
        } tries[] = { { true, GROUP_KILL_V2 }, { false, GROUP_KILL_FREEZE } };

        if (group_find(pid, l, true))
                return;
        for (size_t i = 0; i < ELEMENTSOF(tries); i++) {
                const char *mnt = tries[i].v2 ? v2_mount() : v1_mount("freezer");
                _cleanup_free_ char *own = mnt ? cgroup_pid_path(getpid(), tries[i].v2 ? NULL : "freezer") : NULL;
                char *dir = NULL;

                if (own && cgroup_place(mnt, own, name, NULL, 0, pid, &dir) >= 0) {
                        group_set(l, strdup(dir), tries[i].kill);
                        dirs_add(l, dir);
                        return;
                }
        }
        (void) group_find(pid, l, false);
}

static void oom_watch(pid_t pid, Limits *l) {
        _cleanup_free_ char *text = NULL;
        char buf[512], ctl[4200];
        ssize_t n;

        if (cgroup_oom_path(pid, &l->oom_path) < 0)
                return;
        l->oom_fd = open(l->oom_path, O_RDONLY | O_CLOEXEC);
        if (l->oom_fd < 0)
                return;
        n = pread(l->oom_fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
                return;
        buf[n] = '\0';
        if (cgroup_keyed_value(buf, "oom_kill", &l->oom_base) < 0)
                return;
        l->oom_known = true;
        /* cgroup v1: "<eventfd> <fd of memory.oom_control>" into cgroup.event_control beside it. */
        if (strstr(l->oom_path, "/memory.oom_control")) {
                snprintf(ctl, sizeof ctl, "%.*s/cgroup.event_control",
                         (int) (strlen(l->oom_path) - strlen("/memory.oom_control")), l->oom_path);
                l->oom_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
                snprintf(buf, sizeof buf, "%d %d", l->oom_efd, l->oom_fd);
                if (l->oom_efd >= 0 && write_string_file(ctl, buf) < 0) {
                        close(l->oom_efd);
                        l->oom_efd = -1;
                }
        }
}

bool resources_oom_killed(const Limits *l) {
        char buf[512];
        uint64_t n;
        ssize_t k;

        if (!l->oom_known)
                return false;
        if (l->oom_efd >= 0 && read(l->oom_efd, &n, sizeof n) == (ssize_t) sizeof n && n > 0)
                return true;
        k = pread(l->oom_fd, buf, sizeof buf - 1, 0);
        if (k <= 0)
                return false;
        buf[k] = '\0';
        return cgroup_keyed_value(buf, "oom_kill", &n) >= 0 && n > l->oom_base;
}

/* What follows the scope (scope_r: its outcome, -ENOMEDIUM when there was none to ask for): the
 * verification, the fallbacks, the kernel's own cgroup and the OOM counter. */
static void limits_continue(const ContextConfig *cc, const char *name, pid_t pid, Limits *l, int scope_r) {
        if (resources_wanted(cc)) {
                if (scope_r >= 0) {
                        limits_verify(cc, pid, l);
                        if (!limits_all(cc, l))
                                note_set(l,
                                         "%s does not enforce every limit (are the cgroup controllers "
                                         "delegated and writable?)",
                                         l->unit);
                }
                if (!limits_all(cc, l) && apply_cgroup(cc, name, pid, l) >= 0) {
                        limits_verify(cc, pid, l);
                        if (limits_all(cc, l)) {
                                free(l->note);
                                l->note = NULL;
                        }
                }
                if (cc->memory_max && !l->memory) {
                        /* A soft cap: the address space, so the kernel gets MemoryError rather than the OOM killer. */
                        struct rlimit rl = { .rlim_cur = cc->memory_max, .rlim_max = cc->memory_max };
                        if (prlimit(pid, RLIMIT_AS, &rl, NULL) >= 0) {
                                l->memory = true;
                                if (l->mechanism == LIMITS_NONE)
                                        l->mechanism = LIMITS_RLIMIT;
                        }
                }
        }
        group_place(name, pid, l);
        oom_watch(pid, l);
}

static void scope_complete(ScopeRequest *q) {
        Limits *l = q->limits;
        LimitsDone done = q->done;
        void *userdata = q->userdata;

        if (q->result >= 0) {
                l->unit = TAKE_PTR(q->unit);
                l->mechanism = LIMITS_SYSTEMD;
        }
        limits_continue(&q->want, q->name, q->pid, l, q->result);
        l->scope = NULL;
        scope_free(q);
        done(l, userdata);
}

int resources_apply_async(uv_loop_t *loop, const ContextConfig *cc, const char *name, pid_t pid, Limits *ret,
                          LimitsDone done, void *userdata) {
        int r = -ENOMEDIUM;

        *ret = (Limits){ .mechanism = LIMITS_NONE, .oom_fd = -1, .oom_efd = -1 };
        if (resources_wanted(cc)) {
                r = scope_request(loop, cc, name, pid, ret, &ret->scope);
                if (r >= 0) {
                        ret->scope->done = done;
                        ret->scope->userdata = userdata;
                        return 1;
                }
        }
        limits_continue(cc, name, pid, ret, r);
        return 0;
}

/* Whether the last component of a cgroup path is a sub-cgroup of ours for pid: "kernelsup-NAME-PID". A scope
 * ("kernelsup-NAME-PID.scope") is systemd's, not ours to remove. */
static bool our_dir(const char *path, pid_t pid) {
        const char *last = strrchr(path, '/');
        char suffix[32];
        size_t n, k;

        if (!last || strncmp(last + 1, "kernelsup-", strlen("kernelsup-")) != 0)
                return false;
        snprintf(suffix, sizeof suffix, "-%d", (int) pid);
        n = strlen(last + 1);
        k = strlen(suffix);
        return n > k && streq(last + 1 + n - k, suffix);
}

/* The sub-cgroups of ours an adopted kernel is in, so that they go with it as with one we launched. Returns
 * how many. */
static size_t adopt_dirs(pid_t pid, Limits *l) {
        static const char *const controllers[] = { "memory", "pids", "cpu" };
        size_t n = 0;

        for (size_t i = 0; i < ELEMENTSOF(controllers) && n < ELEMENTSOF(l->dirs); i++) {
                _cleanup_free_ char *path = cgroup_pid_path(pid, controllers[i]);
                const char *mnt = v1_mount(controllers[i]);
                if (path && mnt && our_dir(path, pid))
                        l->dirs[n++] = strjoin(mnt, path);
        }
        if (n == 0 && v2_root()) {
                _cleanup_free_ char *v2 = cgroup_pid_path(pid, NULL);
                if (v2 && our_dir(v2, pid))
                        l->dirs[n++] = strjoin(CGROUP_ROOT, v2);
        }
        return n;
}

void resources_inspect(const ContextConfig *cc, pid_t pid, Limits *ret) {
        Limits l = { .mechanism = LIMITS_NONE, .oom_fd = -1, .oom_efd = -1 };
        _cleanup_free_ char *sd = cgroup_pid_path(pid, "name=systemd"), *v2 = cgroup_pid_path(pid, NULL);
        const char *where = sd ?: v2;

        if (resources_wanted(cc)) {
                limits_verify(cc, pid, &l);
                /* Our own sub-cgroups first: a launch falls back to them when a scope does not enforce every
                 * limit, and the kernel then stays in the scope for name=systemd only. */
                if (adopt_dirs(pid, &l) > 0)
                        l.mechanism = LIMITS_CGROUP;
                else if (where && strstr(where, "/kernelsup-") && strstr(where, ".scope"))
                        l.mechanism = LIMITS_SYSTEMD;
                if (!limits_all(cc, &l))
                        note_set(&l, "adopted: its cgroups do not show every limit");
        }
        /* Its own cgroup goes with it, as with a kernel we launched; a scope is systemd's to remove. */
        if (group_find(pid, &l, false) && !ends_with(l.group, ".scope")) {
                bool known = false;
                for (size_t i = 0; i < ELEMENTSOF(l.dirs); i++)
                        known = known || (l.dirs[i] && streq(l.dirs[i], l.group));
                if (!known)
                        dirs_add(&l, strdup(l.group));
        }
        oom_watch(pid, &l);
        *ret = l;
}

void resources_release(Limits *l) {
        scope_free(l->scope); /* a pending request: done is never called */
        for (size_t i = 0; i < ELEMENTSOF(l->dirs); i++) {
                if (l->dirs[i])
                        (void) rmdir(l->dirs[i]); /* EBUSY while an orphan of the kernel lives on: kept */
                free(l->dirs[i]);
        }
        free(l->unit);
        free(l->group);
        free(l->oom_path);
        free(l->note);
        if (l->oom_fd >= 0)
                close(l->oom_fd);
        if (l->oom_efd >= 0)
                close(l->oom_efd);
        *l = (Limits){ .oom_fd = -1, .oom_efd = -1 };
}

void resources_reply(const ContextConfig *cc, const Limits *l, ReplyLimits *ret) {
        static const char *const names[] = {
                [LIMITS_NONE] = "none",
                [LIMITS_SYSTEMD] = "systemd-scope",
                [LIMITS_CGROUP] = "cgroup",
                [LIMITS_RLIMIT] = "rlimit",
        };
        static const char *const kills[] = {
                [GROUP_KILL_NONE] = "subreaper",
                [GROUP_KILL_V2] = "cgroup.kill",
                [GROUP_KILL_FREEZE] = "freezer",
                [GROUP_KILL_PROCS] = "cgroup.procs",
        };
        const struct {
                unsigned bit;
                bool want, have;
        } items[] = {
                { REPLY_LIMIT_MEMORY, cc->memory_max != 0, l->memory },
                { REPLY_LIMIT_CPU, cc->cpu_quota != 0, l->cpu },
                { REPLY_LIMIT_TASKS, cc->tasks_max != 0, l->tasks },
        };

        *ret = (ReplyLimits){
                .mechanism = names[l->mechanism],
                .memory_max = (long long) cc->memory_max,
                .cpu_quota = cc->cpu_quota,
                .tasks_max = cc->tasks_max,
                .note = l->note,
                .group = l->group,
                .group_kill = kills[l->kill],
        };
        for (size_t i = 0; i < ELEMENTSOF(items); i++)
                if (items[i].want)
                        *(items[i].have ? &ret->enforced : &ret->not_enforced) |= items[i].bit;
}

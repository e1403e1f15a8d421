#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "logrelay.h"
#include "preload.h"
#include "resources.h"
#include "util.h"

/* How long a launcher may take to say it is ready (its imports: 0.4 s on an idle machine, several seconds on a
 * loaded one), to answer a request (a fork of a process of some 60 MiB: some 100 ms on a loaded machine), and
 * the kernel it forked to finish its setup once it is let go. All are waited for on the loop. */
#define PRELOAD_READY_MSEC 30000
#define PRELOAD_REPLY_MSEC 3000
#define PRELOAD_SETUP_MSEC 3000
/* A launcher that died, could not start or did not answer is started again at most this often. */
#define PRELOAD_RETRY_USEC (10 * USEC_PER_SEC)
/* At most this many launchers run: contexts with their own environment each need one, and each holds some
 * 25-60 MiB. The one used least recently is ended to make room only when it has not been used for
 * PRELOAD_IDLE_USEC: ending one in use to start another, in a round of restarts over more environments than
 * this, made every launch cold at the cost of a launcher start each (red-team P8). Until then a new
 * environment's launches are cold and say why. */
#define PRELOAD_LAUNCHERS_MAX 8
#define PRELOAD_IDLE_USEC (10 * 60 * USEC_PER_SEC)
/* The largest request: argv and environment of one kernel. */
#define PRELOAD_REQUEST_MAX (128 * 1024)

typedef enum LauncherState {
        LAUNCHER_STARTING, /* importing; says {"ready"} or {"unable"} when done, within ready_msec */
        LAUNCHER_READY,
        LAUNCHER_DEAD, /* why says why; started again at a launch PRELOAD_RETRY_USEC after dead_at */
} LauncherState;

typedef struct Launcher Launcher;

struct PreloadLaunch {
        PreloadPool *pool;
        Launcher *l; /* the launcher asked (NULL once it is gone) */
        const PreloadCallbacks *cb;
        void *userdata; /* cb and userdata NULL: cancelled */
        /* A copy of the caller's parameters: to go cold with, and to place the kernel. */
        SpawnParams p;
        char **argv, **env, *cwd;
        SpawnUser user;
        int gofd, errfd;     /* the go pipe's write end, the err pipe's read end */
        pid_t pid;           /* once handed over */
        uv_poll_t *poll;     /* on errfd, awaiting the setup report; freed in its close callback */
        uv_timer_t *timer;   /* the setup deadline */
        bool busy;           /* in one of cb's calls: a cancel there only marks it */
        PreloadLaunch *next; /* in its launcher's queue (answers come in the order of the requests), or in the
                              * pool's list of kernels in setup */
};

struct Launcher {
        PreloadPool *pool;
        char **key;     /* interpreter, module, "uid gid groups... limits M T C", then the environment */
        SpawnUser user; /* its identity: uid, gid and groups (no names) */
        uid_t uid;      /* the user it runs as (the daemon's own when user.change is false) */
        /* Its own cgroup, under the limits of the contexts it serves (the key holds them): what a user's .pth or
         * sitecustomize starts in it is bounded, and ended with it. limits is NULL while it has none. */
        ContextConfig want;
        Limits *limits;
        SpawnPending release; /* while systemd has not answered for its scope */
        LauncherState state;
        pid_t pid; /* 0 when none */
        int pidfd, sock;
        uv_poll_t *poll;   /* on sock while it is open; freed in its close callback */
        uv_timer_t *timer; /* the ready deadline while starting, then the deadline of the oldest request */
        PreloadLaunch *queue;
        char *why;      /* while dead */
        char *last_why; /* while starting again: why the last one ended, which its launches say */
        char *note;     /* the sentence a launch through it is told while it starts again */
        bool why_weak;  /* why is a guess ("closed its channel"): its exit status tells better */
        usec_t dead_at; /* CLOCK_MONOTONIC */
        usec_t used_at; /* CLOCK_MONOTONIC: last asked for */
        struct Launcher *next;
};

struct PreloadPool {
        uv_loop_t *loop;
        char *script;
        uint64_t ready_msec, reply_msec; /* PRELOAD_READY_MSEC and PRELOAD_REPLY_MSEC, unless a test says */
        Launcher *launchers;
        PreloadLaunch *setups; /* kernels handed over whose setup report is awaited */
        /* Who launched through the pool, and as whom: once no one of a uid is left, its launchers end. */
        struct PreloadOwner {
                const void *owner;
                uid_t uid;
        } * owners;
        size_t n_owners;
};

/* Variables set per launch: a launcher serves every kernel of its key, whatever these say. */
static bool env_per_launch(const char *e) {
        return strncmp(e, "KERNELSUP_KERNEL_ID=", 20) == 0 || strncmp(e, "KERNELSUP_CONTEXT=", 18) == 0;
}

/* A deadline a test may set in the daemon's environment (test-preload.py: a launcher that never says it is
 * ready need not take 30 s, and on a loaded machine a status must be seen while an answer is awaited). */
static uint64_t deadline_msec(const char *var, uint64_t def) {
        const char *v = getenv(var);
        uint64_t msec = v ? strtoull(v, NULL, 10) : 0;

        return msec > 0 && msec <= 600000 ? msec : def;
}

int preload_pool_new(uv_loop_t *loop, const char *script, PreloadPool **ret) {
        PreloadPool *pool = calloc(1, sizeof *pool);

        if (!pool || !(pool->script = strdup(script))) {
                free(pool);
                return -ENOMEM;
        }
        pool->loop = loop;
        pool->ready_msec = deadline_msec("KERNELSUP_PRELOAD_READY_MSEC", PRELOAD_READY_MSEC);
        pool->reply_msec = deadline_msec("KERNELSUP_PRELOAD_REPLY_MSEC", PRELOAD_REPLY_MSEC);
        *ret = pool;
        return 0;
}

static void handle_free_cb(uv_handle_t *h) {
        free(h);
}

static void handle_drop(uv_handle_t *h) {
        if (h)
                uv_close(h, handle_free_cb);
}

/* ---- One launch ---- */

static void launch_free(PreloadLaunch *pl) {
        handle_drop((uv_handle_t *) pl->poll);
        handle_drop((uv_handle_t *) pl->timer);
        if (pl->gofd >= 0)
                close(pl->gofd);
        if (pl->errfd >= 0)
                close(pl->errfd);
        if (pl->p.stdout_fd >= 0)
                close(pl->p.stdout_fd);
        strv_free(pl->argv);
        strv_free(pl->env);
        free(pl->cwd);
        free(pl->user.groups);
        free(pl);
}

static bool launch_cancelled(const PreloadLaunch *pl) {
        return !pl->cb;
}

/* No kernel for this launch from its launcher: the caller launches cold, saying why. */
static void launch_go_cold(PreloadLaunch *pl, const char *why) {
        if (!launch_cancelled(pl)) {
                pl->busy = true;
                pl->cb->launched(pl, pl->userdata, -EAGAIN, 0, -1, why, &pl->p);
        }
        launch_free(pl);
}

static void setups_unlink(PreloadLaunch *pl) {
        for (PreloadLaunch **q = &pl->pool->setups; *q; q = &(*q)->next)
                if (*q == pl) {
                        *q = pl->next;
                        break;
                }
        pl->next = NULL;
}

/* The kernel's setup is over: msg NULL (done), or why not. */
static void launch_setup_end(PreloadLaunch *pl, const char *msg) {
        setups_unlink(pl);
        if (!launch_cancelled(pl)) {
                pl->busy = true;
                pl->cb->setup_done(pl, pl->userdata, msg);
        }
        launch_free(pl);
}

/* Reads the setup report: a failed step, or EOF (done); nothing yet leaves it watched. */
static void launch_setup_read(PreloadLaunch *pl) {
        _cleanup_free_ char *msg = NULL;
        int report[2];
        ssize_t k;

        do
                k = read(pl->errfd, report, sizeof report);
        while (k < 0 && errno == EINTR);
        if (k < 0 && errno == EAGAIN)
                return;
        /* Closed without a word (it runs the module now) is success, as after a cold child's exec. */
        if (k == (ssize_t) sizeof report)
                msg = spawn_report_error(report, pl->argv[0], pl->cwd);
        launch_setup_end(pl, k == (ssize_t) sizeof report ? (msg ?: "its setup failed") : NULL);
}

static void launch_setup_poll_cb(uv_poll_t *h, int status, int events) {
        launch_setup_read(h->data);
}

void preload_launch_settle(PreloadLaunch *pl) {
        if (pl && pl->pid > 0 && pl->poll && !pl->busy)
                launch_setup_read(pl);
}

static void launcher_dead(Launcher *l, const char *why, usec_t retry_after, bool weak);

static void launch_setup_timer_cb(uv_timer_t *t) {
        PreloadLaunch *pl = t->data;
        char why[128];

        /* Not let go yet: it waits for its systemd scope (which has a deadline of its own). */
        if (pl->p.pending && pl->p.pending->gofd >= 0) {
                uv_timer_start(pl->timer, launch_setup_timer_cb, PRELOAD_SETUP_MSEC, 0);
                return;
        }
        /* Still our child, unreaped (its context reaps it only after its exit, which would have closed errfd). */
        if (proc_pid_ppid(pl->pid) == getpid()) {
                (void) kill(-pl->pid, SIGKILL);
                (void) kill(pl->pid, SIGKILL);
        }
        snprintf(why, sizeof why, "a kernel it forked did not finish its setup within %d s",
                 PRELOAD_SETUP_MSEC / 1000);
        if (pl->l)
                launcher_dead(pl->l, why, PRELOAD_RETRY_USEC, false);
        snprintf(why, sizeof why, "its setup did not finish within %d s; killed", PRELOAD_SETUP_MSEC / 1000);
        launch_setup_end(pl, why);
}

/* The launcher named the kernel it forked, checked: it is placed (p->prepare), let go, and handed over, its
 * setup report then read on the loop. */
static void launch_hand_over(PreloadLaunch *pl, pid_t pid) {
        _cleanup_free_ char *err = NULL;
        int gofd = pl->gofd, pidfd = -1, r;
        pid_t kpid = 0;

        pl->gofd = -1;
        if (launch_cancelled(pl)) {
                /* Without its byte it exits before it runs anything. */
                close(gofd);
                (void) kill(pid, SIGKILL);
                launch_free(pl);
                return;
        }
        r = spawn_finish(&pl->p, pid, -1, gofd, -1, &kpid, &pidfd, &err);
        if (r < 0) {
                pl->busy = true;
                pl->cb->launched(pl, pl->userdata, r, 0, -1, err ?: strerror(-r), &pl->p);
                launch_free(pl);
                return;
        }
        pl->pid = kpid;
        pl->next = pl->pool->setups;
        pl->pool->setups = pl;
        pl->poll = malloc(sizeof(uv_poll_t));
        pl->timer = malloc(sizeof(uv_timer_t));
        if (!pl->poll || !pl->timer || uv_poll_init(pl->pool->loop, pl->poll, pl->errfd) < 0) {
                free(pl->poll);
                free(pl->timer);
                pl->poll = NULL;
                pl->timer = NULL;
        } else {
                pl->poll->data = pl->timer->data = pl;
                uv_timer_init(pl->pool->loop, pl->timer);
                uv_poll_start(pl->poll, UV_READABLE, launch_setup_poll_cb);
                uv_timer_start(pl->timer, launch_setup_timer_cb, PRELOAD_SETUP_MSEC, 0);
        }
        pl->busy = true;
        pl->cb->launched(pl, pl->userdata, 0, kpid, pidfd, NULL, &pl->p);
        pl->busy = false;
        /* Cancelled meanwhile, or not watchable: the kernel is the caller's alone. */
        if (launch_cancelled(pl)) {
                setups_unlink(pl);
                launch_free(pl);
        } else if (!pl->poll)
                launch_setup_end(pl, NULL);
}

void preload_launch_cancel(PreloadLaunch *pl) {
        if (!pl)
                return;
        pl->cb = NULL;
        pl->userdata = NULL;
        pl->p.prepare = NULL;
        pl->p.userdata = NULL;
        pl->p.pending = NULL;
        /* One awaiting its answer stays in its launcher's queue: answers come in order. */
        if (pl->pid > 0 && !pl->busy) {
                setups_unlink(pl);
                launch_free(pl);
        }
}

/* ---- Launchers ---- */

static void launcher_group_done(int r, GroupKill kill, const char *group, void *userdata) {
        Limits *lim = userdata;

        if (r < 0)
                log_warning("preloaded launcher's cgroup %s: processes are left in it", group ?: "-");
        resources_release(lim);
        free(lim);
}

/* After its launcher has exited (or been SIGKILLed): everything left in its cgroup is ended (what a user's
 * code started there), and the cgroup removed. */
static void launcher_group_end(Launcher *l) {
        Limits *lim = TAKE_PTR(l->limits);
        char tag[64];
        LeftoverEnd *e = NULL;

        if (!lim)
                return;
        spawn_pending_drop(&l->release);
        snprintf(tag, sizeof tag, "KERNELSUP_LAUNCHER=%u", (unsigned) l->uid);
        if (resources_end_group_start(l->pool->loop, lim, tag, 5 * USEC_PER_SEC, launcher_group_done, lim, &e) !=
            -EINPROGRESS) {
                resources_release(lim);
                free(lim);
        }
}

static void launcher_close(Launcher *l) {
        handle_drop((uv_handle_t *) l->poll);
        l->poll = NULL;
        handle_drop((uv_handle_t *) l->timer);
        l->timer = NULL;
        if (l->sock >= 0)
                close(l->sock);
        l->sock = -1;
}

/* Every launch awaiting l's answer goes cold, saying why. */
static void launcher_fail_queue(Launcher *l, const char *why) {
        PreloadLaunch *q = l->queue;
        _cleanup_free_ char *copy = strdup(why);

        l->queue = NULL;
        while (q) {
                PreloadLaunch *next = q->next;
                q->l = NULL;
                q->next = NULL;
                /* A kernel it forked for q exits without its byte: the go pipe closes with q. */
                launch_go_cold(q, copy ?: "the preloaded launcher ended");
                q = next;
        }
}

/* The launcher is of no use any more: it is ended (SIGKILL; reaped by preload_child_exited() or, when the pool
 * is gone, as an orphan), the launches waiting for it go cold at once, and so do launches until it is started
 * again, saying why. weak: why is a guess its exit status will tell better. */
static void launcher_dead(Launcher *l, const char *why, usec_t retry_after, bool weak) {
        launcher_close(l);
        if (l->pid > 0) {
                (void) pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
                log_warning("preloaded launcher %d (%s -m %s): %s", (int) l->pid, l->key[0], l->key[1], why);
        }
        /* The first cause is the one to tell (a launcher killed for not answering then exits by SIGKILL). */
        if (l->state != LAUNCHER_DEAD || !l->why || l->why_weak) {
                free(l->why);
                l->why = strdup(why);
                l->why_weak = weak;
                l->state = LAUNCHER_DEAD;
                l->dead_at = now_usec(CLOCK_MONOTONIC) - PRELOAD_RETRY_USEC + retry_after;
        }
        launcher_fail_queue(l, l->why ?: why);
}

static void launcher_free(Launcher *l) {
        launcher_close(l);
        if (l->pid > 0) {
                /* Reaped here: after SIGKILL it is gone at once, and no one else would reap it. */
                (void) pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
                (void) waitid(P_PIDFD, (id_t) l->pidfd, &(siginfo_t){ 0 }, WEXITED);
                close(l->pidfd);
        }
        launcher_group_end(l);
        launcher_fail_queue(l, "the preloaded launcher was ended");
        for (PreloadLaunch *s = l->pool->setups; s; s = s->next)
                if (s->l == l)
                        s->l = NULL;
        strv_free(l->key);
        free(l->user.groups);
        free(l->why);
        free(l->last_why);
        free(l->note);
        free(l);
}

void preload_pool_free(PreloadPool *pool) {
        if (!pool)
                return;
        while (pool->launchers) {
                Launcher *l = pool->launchers;
                pool->launchers = l->next;
                launcher_free(l);
        }
        while (pool->setups) {
                PreloadLaunch *pl = pool->setups;
                pool->setups = pl->next;
                launch_free(pl);
        }
        free(pool->owners);
        free(pool->script);
        free(pool);
}

/* One datagram from the launcher: 1 and *ret its JSON (NULL when it is not JSON), 0 on EOF, -EAGAIN when
 * there is none after all. */
static int launcher_recv(Launcher *l, json_t **ret) {
        char buf[4096];
        ssize_t k;

        do
                k = recv(l->sock, buf, sizeof buf - 1, MSG_DONTWAIT);
        while (k < 0 && errno == EINTR);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return -EAGAIN;
        if (k <= 0)
                return 0;
        *ret = json_loadb(buf, (size_t) k, 0, NULL);
        return 1;
}

/* Whether pid holds the pipe whose other end is fd: only the kernel forked for this request does. */
static bool pid_holds_pipe(pid_t pid, int fd) {
        char dir[64], link[64], want[64];
        struct stat st;
        DIR *d;
        bool found = false;

        if (fstat(fd, &st) < 0)
                return false;
        snprintf(want, sizeof want, "pipe:[%lu]", (unsigned long) st.st_ino);
        snprintf(dir, sizeof dir, "/proc/%d/fd", (int) pid);
        d = opendir(dir);
        if (!d)
                return false;
        for (struct dirent *de; !found && (de = readdir(d));) {
                ssize_t k = readlinkat(dirfd(d), de->d_name, link, sizeof link - 1);
                found = k > 0 && (link[k] = 0, streq(link, want));
        }
        closedir(d);
        return found;
}

/* The launcher's answer to its oldest request pl (out of its queue): the kernel, or why not. */
static void launcher_answer(Launcher *l, PreloadLaunch *pl, json_t *j) {
        const char *s;
        json_int_t pid;

        if ((s = json_string_value(json_object_get(j, "cold"))))
                return launch_go_cold(pl, s);
        if ((s = json_string_value(json_object_get(j, "stale")))) {
                /* It ends itself; the next launch starts a fresh one at once. */
                char why[PATH_MAX + 128];
                snprintf(why, sizeof why, "the preloaded launcher is renewed: %s", s);
                launcher_dead(l, why, 0, false);
                return launch_go_cold(pl, why);
        }
        pid = json_integer_value(json_object_get(j, "pid"));
        /* Never act on a pid the launcher names unless it is provably this launch's kernel: our child (its
         * intermediate parent gone) holding the pipe we made for it. */
        if (pid <= 0 || pid > INT32_MAX || proc_pid_ppid((pid_t) pid) != getpid() ||
            !pid_holds_pipe((pid_t) pid, pl->gofd)) {
                const char *why = "the launcher named a process that is not the kernel it forked";
                launcher_dead(l, why, PRELOAD_RETRY_USEC, false);
                return launch_go_cold(pl, why);
        }
        launch_hand_over(pl, (pid_t) pid);
}

/* The deadline of the oldest request, from its being sent or from the answer before it. */
static void launcher_arm(Launcher *l);

static void launcher_timer_cb(uv_timer_t *t) {
        Launcher *l = t->data;
        char why[128], d[32];

        if (l->state == LAUNCHER_STARTING)
                snprintf(why, sizeof why, "the launcher did not say it was ready within %s",
                         format_duration(d, sizeof d, l->pool->ready_msec * USEC_PER_MSEC));
        else if (l->queue)
                snprintf(why, sizeof why, "the launcher did not answer within %s",
                         format_duration(d, sizeof d, l->pool->reply_msec * USEC_PER_MSEC));
        else
                return;
        launcher_dead(l, why, PRELOAD_RETRY_USEC, false);
}

static void launcher_arm(Launcher *l) {
        if (!l->timer)
                return;
        if (l->queue)
                uv_timer_start(l->timer, launcher_timer_cb, l->pool->reply_msec, 0);
        else
                uv_timer_stop(l->timer);
}

static void launcher_poll_cb(uv_poll_t *h, int status, int events) {
        Launcher *l = h->data;
        json_auto_t *j = NULL;
        int k = launcher_recv(l, &j);
        const char *unable = json_string_value(json_object_get(j, "unable"));

        if (k == -EAGAIN)
                return;
        if (k == 0)
                /* Its end: how it ended (an exit code, a signal) comes with its exit, which is the better message;
                 * what waits for it goes cold now. */
                return launcher_dead(l, "the preloaded launcher closed its channel", PRELOAD_RETRY_USEC, true);
        if (l->state == LAUNCHER_STARTING) {
                if (json_integer_value(json_object_get(j, "ready")) == l->pid) {
                        uv_timer_stop(l->timer);
                        l->state = LAUNCHER_READY;
                        free(l->last_why);
                        l->last_why = NULL;
                        log_info("preloaded launcher %d (%s -m %s) is ready", (int) l->pid, l->key[0], l->key[1]);
                        return;
                }
                if (unable) {
                        char why[600];
                        snprintf(why, sizeof why, "cannot preload: %s", unable);
                        return launcher_dead(l, why, PRELOAD_RETRY_USEC, false);
                }
                return launcher_dead(l, "the launcher said something else than ready", PRELOAD_RETRY_USEC, false);
        }
        PreloadLaunch *pl = l->queue;
        if (!pl)
                return launcher_dead(l, "the launcher spoke unasked", PRELOAD_RETRY_USEC, false);
        l->queue = pl->next;
        pl->next = NULL;
        launcher_arm(l);
        launcher_answer(l, pl, j);
}

/* The key's first three rows; the environment follows. */
static int launcher_key(const SpawnParams *p, const ContextConfig *cc, const char *module, char ***ret) {
        _cleanup_strv_free_ char **key = NULL;
        size_t n = 0;
        char ids[64 + 12 * 64];
        const SpawnUser *u = p->user;
        int r;

        if (u && u->change) {
                size_t len = (size_t) snprintf(ids, sizeof ids, "%u %u", (unsigned) u->uid, (unsigned) u->gid);
                for (int i = 0; i < u->n_groups && len < sizeof ids - 12; i++)
                        len += (size_t) snprintf(ids + len, sizeof ids - len, " %u", (unsigned) u->groups[i]);
        } else
                snprintf(ids, sizeof ids, "daemon");
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), " limits %" PRIu64 " %u %u", cc->memory_max,
                 cc->tasks_max, cc->cpu_quota);
        if ((r = strv_push(&key, &n, strdup(p->argv[0]))) < 0 || (r = strv_push(&key, &n, strdup(module))) < 0 ||
            (r = strv_push(&key, &n, strdup(ids))) < 0)
                return r;
        for (char *const *e = p->env; *e; e++)
                if (!env_per_launch(*e) && (r = strv_push(&key, &n, strdup(*e))) < 0)
                        return r;
        *ret = TAKE_PTR(key);
        return 0;
}

/* Starts l's process: the interpreter running the launcher's file for the module, as the context's user, with
 * the environment of the key, the channel as its descriptor 3. Its "ready" comes through the loop, within
 * ready_msec. */
static void launcher_limits_done(Limits *lim, void *userdata) {
        Launcher *l = userdata;
        _cleanup_free_ char *err = NULL;

        if (resources_wanted(&l->want) && lim->note)
                log_warning("preloaded launcher %d: %s", (int) l->pid, lim->note);
        (void) spawn_release(&l->release, &err);
}

/* The forked launcher waits before exec: into a cgroup of its own, under its limits. */
static int launcher_place(pid_t pid, void *userdata, char **ret_error) {
        Launcher *l = userdata;
        char name[32];

        l->limits = malloc(sizeof *l->limits);
        if (!l->limits)
                return -ENOMEM;
        snprintf(name, sizeof name, "launcher-%u", (unsigned) l->uid);
        return resources_apply_async(l->pool->loop, &l->want, name, pid, l->limits, launcher_limits_done, l) > 0
                       ? SPAWN_DEFER
                       : 0;
}

/* The launcher's environment: the key's, and the tag that finds what it left where it has no cgroup. */
static int launcher_env(const Launcher *l, char ***ret) {
        _cleanup_strv_free_ char **env = NULL;
        size_t n = 0;
        char tag[64];
        int r;

        snprintf(tag, sizeof tag, "KERNELSUP_LAUNCHER=%u", (unsigned) l->uid);
        for (char **e = l->key + 3; *e; e++)
                if ((r = strv_push(&env, &n, strdup(*e))) < 0)
                        return r;
        if ((r = strv_push(&env, &n, strdup(tag))) < 0)
                return r;
        *ret = TAKE_PTR(env);
        return 0;
}

static int launcher_start(Launcher *l) {
        char *argv[] = { l->key[0], l->pool->script, l->key[1], NULL };
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *err = NULL;
        char prefix[32];
        int sv[2], out, r;

        snprintf(prefix, sizeof prefix, "launcher %u", (unsigned) l->uid);
        if ((r = launcher_env(l, &env)) < 0)
                return r;
        /* What it (and a user's .pth) writes reaches our log prefixed and bounded, as a kernel's does. */
        out = log_relay_open(l->pool->loop, prefix, "the launcher's", NULL, NULL);
        if (out < 0)
                return out;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                close(out);
                return -errno;
        }
        SpawnParams p = {
                .argv = argv,
                .env = env,
                .cwd = "/",
                .user = &l->user,
                .stdout_fd = out,
                .prepare = launcher_place,
                .userdata = l,
                .pending = &l->release,
                .pass_fd = sv[1],
        };
        r = spawn_kernel(&p, &l->pid, &l->pidfd, &err);
        close(sv[1]);
        close(out);
        if (r < 0) {
                close(sv[0]);
                l->pid = 0;
                launcher_group_end(l);
                launcher_dead(l, err ?: strerror(-r), PRELOAD_RETRY_USEC, false);
                return r;
        }
        l->sock = sv[0];
        l->poll = malloc(sizeof(uv_poll_t));
        l->timer = malloc(sizeof(uv_timer_t));
        if (!l->poll || !l->timer || uv_poll_init(l->pool->loop, l->poll, l->sock) < 0) {
                free(l->poll);
                free(l->timer);
                l->poll = NULL;
                l->timer = NULL;
                launcher_dead(l, "cannot watch the launcher", PRELOAD_RETRY_USEC, false);
                return -ENOMEM;
        }
        uv_timer_init(l->pool->loop, l->timer);
        l->poll->data = l->timer->data = l;
        uv_poll_start(l->poll, UV_READABLE, launcher_poll_cb);
        uv_timer_start(l->timer, launcher_timer_cb, l->pool->ready_msec, 0);
        free(l->last_why);
        l->last_why = TAKE_PTR(l->why);
        l->why_weak = false;
        l->state = LAUNCHER_STARTING;
        log_info("preloaded launcher %d (%s -m %s) started", (int) l->pid, l->key[0], l->key[1]);
        return 0;
}

static Launcher *launcher_find(PreloadPool *pool, char **key) {
        for (Launcher *l = pool->launchers; l; l = l->next)
                if (strv_equal(l->key, key))
                        return l;
        return NULL;
}

/* Why a launch through l cannot happen now, starting it again when it is time; NULL when it is ready. */
static const char *launcher_why_not(Launcher *l) {
        if (l->state == LAUNCHER_DEAD && l->pid == 0 && now_usec(CLOCK_MONOTONIC) - l->dead_at >= PRELOAD_RETRY_USEC &&
            launcher_start(l) < 0)
                return l->why;
        if (l->state == LAUNCHER_STARTING && l->last_why) {
                /* Not "still importing": the last one could not start or ended (a missing file, an exit). */
                free(l->note);
                if (asprintf(&l->note, "the preloaded launcher is starting again; the last one: %s", l->last_why) < 0)
                        l->note = NULL;
                return l->note ?: l->last_why;
        }
        if (l->state == LAUNCHER_STARTING)
                return "the preloaded launcher is still importing";
        if (l->state == LAUNCHER_DEAD)
                return l->why ?: "the preloaded launcher ended";
        return NULL;
}

/* Sends the request: argv, environment and cwd as JSON, the kernel's output, go and err descriptors. */
static int launcher_send(Launcher *l, const SpawnParams *p, int gofd, int errfd) {
        json_auto_t *argv = json_array(), *env = json_array(), *req = NULL;
        _cleanup_free_ char *text = NULL;
        int fds[3] = { p->stdout_fd, gofd, errfd };
        char cbuf[CMSG_SPACE(sizeof fds)] = { 0 };
        struct iovec iov;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

        for (char *const *a = p->argv; *a; a++)
                json_array_append_new(argv, json_string(*a));
        for (char *const *e = p->env; *e; e++)
                json_array_append_new(env, json_string(*e));
        req = json_pack("{s:O, s:O, s:s}", "argv", argv, "env", env, "cwd", p->cwd ?: "/");
        text = req ? json_dumps(req, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (!text)
                return -ENOMEM;
        if (strlen(text) > PRELOAD_REQUEST_MAX)
                return -E2BIG;
        iov = (struct iovec){ .iov_base = text, .iov_len = strlen(text) };
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof fds);
        memcpy(CMSG_DATA(cm), fds, sizeof fds);
        if (sendmsg(l->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                return -errno;
        return 0;
}

/* Ends the launcher used least recently when there are PRELOAD_LAUNCHERS_MAX and it has been idle for
 * PRELOAD_IDLE_USEC; -ENOSPC when there are that many, all used since. */
static int launchers_make_room(PreloadPool *pool) {
        Launcher **oldest = NULL;
        size_t n = 0;

        for (Launcher **l = &pool->launchers; *l; l = &(*l)->next, n++)
                if (!oldest || (*l)->used_at < (*oldest)->used_at)
                        oldest = l;
        if (n < PRELOAD_LAUNCHERS_MAX)
                return 0;
        if (now_usec(CLOCK_MONOTONIC) - (*oldest)->used_at < PRELOAD_IDLE_USEC)
                return -ENOSPC;
        Launcher *victim = *oldest;
        *oldest = victim->next;
        if (victim->pid > 0)
                log_info("preloaded launcher %d (%s -m %s): ended, the least recently used of %d", (int) victim->pid,
                         victim->key[0], victim->key[1], PRELOAD_LAUNCHERS_MAX);
        launcher_free(victim);
        return 0;
}

static int user_copy(const SpawnUser *from, SpawnUser *to) {
        *to = (SpawnUser){ 0 };
        if (!from || !from->change)
                return 0;
        *to = (SpawnUser){ .change = true, .uid = from->uid, .gid = from->gid, .n_groups = from->n_groups };
        to->groups = calloc((size_t) from->n_groups + 1, sizeof(gid_t));
        if (!to->groups)
                return -ENOMEM;
        memcpy(to->groups, from->groups, sizeof(gid_t) * (size_t) from->n_groups);
        return 0;
}

/* The launcher of p's key, started when there is none and there is room; NULL with *ret_r -ENOSPC (no room)
 * or -ENOMEM. */
static Launcher *launcher_get(PreloadPool *pool, const SpawnParams *p, const ContextConfig *cc, const char *module,
                              int *ret_r) {
        _cleanup_strv_free_ char **key = NULL;
        Launcher *l;

        *ret_r = -ENOMEM;
        if (launcher_key(p, cc, module, &key) < 0)
                return NULL;
        l = launcher_find(pool, key);
        if (l) {
                l->used_at = now_usec(CLOCK_MONOTONIC);
                return l;
        }
        *ret_r = launchers_make_room(pool);
        if (*ret_r < 0)
                return NULL;
        *ret_r = -ENOMEM;
        l = calloc(1, sizeof *l);
        if (!l)
                return NULL;
        *l = (Launcher){
                .pool = pool,
                .key = TAKE_PTR(key),
                .pidfd = -1,
                .sock = -1,
                .uid = p->user && p->user->change ? p->user->uid : getuid(),
                .want = { .memory_max = cc->memory_max, .cpu_quota = cc->cpu_quota, .tasks_max = cc->tasks_max },
                .release = { .gofd = -1, .errfd = -1 },
                .used_at = now_usec(CLOCK_MONOTONIC),
                .next = pool->launchers
        };
        if (user_copy(p->user, &l->user) < 0) {
                launcher_free(l);
                return NULL;
        }
        pool->launchers = l;
        (void) launcher_start(l);
        return l;
}

static bool subreaper(void) {
        int on = 0;

        return getpid() == 1 || (prctl(PR_GET_CHILD_SUBREAPER, &on) >= 0 && on);
}

/* What the launch keeps of p: to place the kernel once it is named, or to go cold with. */
static PreloadLaunch *launch_new(PreloadPool *pool, Launcher *l, const SpawnParams *p) {
        PreloadLaunch *pl = calloc(1, sizeof *pl);

        if (!pl)
                return NULL;
        *pl = (PreloadLaunch){ .pool = pool, .l = l, .gofd = -1, .errfd = -1, .p = *p };
        pl->p.stdout_fd = fcntl(p->stdout_fd, F_DUPFD_CLOEXEC, 3);
        if (pl->p.stdout_fd < 0 || strv_copy(p->argv, &pl->argv) < 0 || strv_copy(p->env, &pl->env) < 0 ||
            !(pl->cwd = strdup(p->cwd ?: "/")) || user_copy(p->user, &pl->user) < 0) {
                launch_free(pl);
                return NULL;
        }
        pl->p.argv = pl->argv;
        pl->p.env = pl->env;
        pl->p.cwd = pl->cwd;
        pl->p.user = &pl->user;
        return pl;
}

/* userdata launches as uid: noted, so that its launchers end once no one of that uid is left. */
static int owner_note(PreloadPool *pool, const void *owner, uid_t uid) {
        struct PreloadOwner *o;

        for (size_t i = 0; i < pool->n_owners; i++)
                if (pool->owners[i].owner == owner) {
                        pool->owners[i].uid = uid;
                        return 0;
                }
        o = reallocarray(pool->owners, pool->n_owners + 1, sizeof *o);
        if (!o)
                return -ENOMEM;
        pool->owners = o;
        o[pool->n_owners++] = (struct PreloadOwner){ owner, uid };
        return 0;
}

void preload_owner_gone(PreloadPool *pool, const void *owner) {
        uid_t uid;
        size_t i;

        for (i = 0; pool && i < pool->n_owners && pool->owners[i].owner != owner; i++)
                ;
        if (!pool || i == pool->n_owners)
                return;
        uid = pool->owners[i].uid;
        pool->owners[i] = pool->owners[--pool->n_owners];
        for (i = 0; i < pool->n_owners; i++)
                if (pool->owners[i].uid == uid)
                        return;
        for (Launcher **l = &pool->launchers; *l;) {
                Launcher *victim = *l;
                if (victim->uid != uid) {
                        l = &victim->next;
                        continue;
                }
                *l = victim->next;
                if (victim->pid > 0)
                        log_info("preloaded launcher %d (%s -m %s): ended, no context of uid %u is running",
                                 (int) victim->pid, victim->key[0], victim->key[1], (unsigned) uid);
                launcher_free(victim);
        }
}

int preload_spawn(PreloadPool *pool, const SpawnParams *p, const ContextConfig *cc, const PreloadCallbacks *cb,
                  void *userdata, PreloadLaunch **ret_launch, char **ret_cold) {
        const char *module = argv_python_module(p->argv), *why;
        int gopipe[2], errpipe[2], r;
        PreloadLaunch *pl;
        Launcher *l;

        if (!module) {
                *ret_cold = strdup("argv is not PYTHON -m MODULE");
                return -EAGAIN;
        }
        /* The kernel's parent is the nearest subreaper once its launcher's child has exited: it must be us. */
        if (!subreaper()) {
                *ret_cold =
                        strdup("kernelsupd is not a child subreaper, so a preloaded kernel would not be its child");
                return -EAGAIN;
        }
        if (owner_note(pool, userdata, p->user && p->user->change ? p->user->uid : getuid()) < 0)
                return -ENOMEM;
        l = launcher_get(pool, p, cc, module, &r);
        if (!l && r == -ENOSPC) {
                *ret_cold = strdup("8 preloaded launchers run, each used in the last 10 minutes, and this "
                                   "context's environment or limits need another");
                return -EAGAIN;
        }
        if (!l)
                return -ENOMEM;
        why = launcher_why_not(l);
        if (why) {
                *ret_cold = strdup(why);
                return -EAGAIN;
        }
        pl = launch_new(pool, l, p);
        if (!pl)
                return -ENOMEM;
        pl->cb = cb;
        pl->userdata = userdata;
        if (pipe2(gopipe, O_CLOEXEC) < 0) {
                launch_free(pl);
                return -errno;
        }
        if (pipe2(errpipe, O_CLOEXEC | O_NONBLOCK) < 0) {
                close(gopipe[0]);
                close(gopipe[1]);
                launch_free(pl);
                return -errno;
        }
        /* The kernel's end is blocking: a forked child inherits the flag (O_NONBLOCK is the file's, not the
         * descriptor's), and it writes its report in one piece. Ours only is read on the loop. */
        r = fcntl(errpipe[1], F_SETFL, 0) < 0 ? -errno : launcher_send(l, p, gopipe[0], errpipe[1]);
        close(gopipe[0]);
        close(errpipe[1]);
        pl->gofd = gopipe[1];
        pl->errfd = errpipe[0];
        if (r < 0) {
                char why_send[160];
                snprintf(why_send, sizeof why_send, "cannot send the launch request: %s", strerror(-r));
                /* A request too large for it says nothing about the launcher. */
                if (r != -E2BIG && r != -EMSGSIZE)
                        launcher_dead(l, why_send, PRELOAD_RETRY_USEC, false);
                *ret_cold = strdup(why_send);
                launch_free(pl);
                return -EAGAIN;
        }
        PreloadLaunch **tail = &l->queue;
        while (*tail)
                tail = &(*tail)->next;
        *tail = pl;
        if (l->queue == pl)
                launcher_arm(l);
        *ret_launch = pl;
        return 0;
}

bool preload_child_exited(PreloadPool *pool, pid_t pid) {
        for (Launcher *l = pool ? pool->launchers : NULL; l; l = l->next) {
                siginfo_t si = { 0 };
                char why[128];

                if (l->pid != pid)
                        continue;
                if (waitid(P_PIDFD, (id_t) l->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
                        return true;
                if (si.si_code == CLD_EXITED)
                        snprintf(why, sizeof why, "the preloaded launcher exited with code %d", si.si_status);
                else
                        snprintf(why, sizeof why, "the preloaded launcher was killed by SIG%s",
                                 sigabbrev_np(si.si_status) ?: "?");
                if (l->state != LAUNCHER_DEAD || l->why_weak)
                        log_warning("preloaded launcher %d (%s -m %s): %s", (int) pid, l->key[0], l->key[1], why);
                close(l->pidfd);
                l->pidfd = -1;
                l->pid = 0;
                launcher_group_end(l);
                launcher_dead(l, why, PRELOAD_RETRY_USEC, false);
                /* One that asked to be renewed (what it imported changed) is started again at once. */
                if (now_usec(CLOCK_MONOTONIC) - l->dead_at >= PRELOAD_RETRY_USEC)
                        (void) launcher_start(l);
                return true;
        }
        return false;
}

size_t preload_running(const PreloadPool *pool) {
        size_t n = 0;

        for (const Launcher *l = pool ? pool->launchers : NULL; l; l = l->next)
                n += l->pid > 0;
        return n;
}

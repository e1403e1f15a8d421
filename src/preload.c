#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
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
#include "preload.h"
#include "util.h"

/* How long a ready launcher may take to answer a request (a fork of a process of some 60 MiB), and the
 * kernel it forked to finish its setup after our word. The loop waits for both, so they are short; on a
 * loaded machine a fork takes some 100 ms. */
#define PRELOAD_REPLY_MSEC 3000
#define PRELOAD_SETUP_MSEC 3000
/* A launcher that died, could not start or did not answer is started again at most this often. */
#define PRELOAD_RETRY_USEC (10 * USEC_PER_SEC)
/* At most this many launchers run: contexts with their own environment each need one, and each holds some
 * 25-60 MiB; the one used least recently is ended to make room. */
#define PRELOAD_LAUNCHERS_MAX 8
/* The largest request: argv and environment of one kernel. */
#define PRELOAD_REQUEST_MAX (128 * 1024)

typedef enum LauncherState {
        LAUNCHER_STARTING, /* importing; says {"ready"} or {"unable"} when done */
        LAUNCHER_READY,
        LAUNCHER_DEAD, /* why says why; started again at a launch PRELOAD_RETRY_USEC after dead_at */
} LauncherState;

typedef struct Launcher {
        PreloadPool *pool;
        char **key;     /* interpreter, module, "uid gid groups...", then the environment */
        SpawnUser user; /* its identity: uid, gid and groups (no names) */
        LauncherState state;
        pid_t pid; /* 0 when none */
        int pidfd, sock;
        uv_poll_t *poll; /* on sock while starting; freed in its close callback */
        char *why;       /* while dead */
        usec_t dead_at;  /* CLOCK_MONOTONIC */
        usec_t used_at;  /* CLOCK_MONOTONIC: last asked for */
        struct Launcher *next;
} Launcher;

struct PreloadPool {
        uv_loop_t *loop;
        char *script;
        Launcher *launchers;
};

/* Variables set per launch: a launcher serves every kernel of its key, whatever these say. */
static bool env_per_launch(const char *e) {
        return strncmp(e, "KERNELSUP_KERNEL_ID=", 20) == 0 || strncmp(e, "KERNELSUP_CONTEXT=", 18) == 0;
}

int preload_pool_new(uv_loop_t *loop, const char *script, PreloadPool **ret) {
        PreloadPool *pool = calloc(1, sizeof *pool);

        if (!pool || !(pool->script = strdup(script))) {
                free(pool);
                return -ENOMEM;
        }
        pool->loop = loop;
        *ret = pool;
        return 0;
}

static void poll_close_cb(uv_handle_t *h) {
        free(h);
}

static void launcher_close(Launcher *l) {
        if (l->poll) {
                uv_close((uv_handle_t *) l->poll, poll_close_cb);
                l->poll = NULL;
        }
        if (l->sock >= 0)
                close(l->sock);
        l->sock = -1;
}

/* The launcher is of no use any more: it is ended (SIGKILL; reaped by preload_child_exited() or, when the pool
 * is gone, as an orphan) and launches go cold, saying why, until it is started again. */
static void launcher_dead(Launcher *l, const char *why, usec_t retry_after) {
        launcher_close(l);
        if (l->pid > 0) {
                (void) pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
                log_warning("preloaded launcher %d (%s -m %s): %s", (int) l->pid, l->key[0], l->key[1], why);
        }
        /* The first cause is the one to tell (a launcher killed for not answering then exits by SIGKILL). */
        if (l->state == LAUNCHER_DEAD && l->why)
                return;
        free(l->why);
        l->why = strdup(why);
        l->state = LAUNCHER_DEAD;
        l->dead_at = now_usec(CLOCK_MONOTONIC) - PRELOAD_RETRY_USEC + retry_after;
}

static void launcher_free(Launcher *l) {
        launcher_close(l);
        if (l->pid > 0) {
                /* Reaped here: after SIGKILL it is gone at once, and no one else would reap it. */
                (void) pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
                (void) waitid(P_PIDFD, (id_t) l->pidfd, &(siginfo_t){ 0 }, WEXITED);
                close(l->pidfd);
        }
        strv_free(l->key);
        free(l->user.groups);
        free(l->why);
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
        free(pool->script);
        free(pool);
}

/* One datagram from the launcher as JSON (NULL on EOF or garbage). */
static json_t *launcher_recv(Launcher *l) {
        char buf[4096];
        ssize_t k;

        do
                k = recv(l->sock, buf, sizeof buf - 1, MSG_DONTWAIT);
        while (k < 0 && errno == EINTR);
        if (k <= 0)
                return NULL;
        return json_loadb(buf, (size_t) k, 0, NULL);
}

static void launcher_poll_cb(uv_poll_t *h, int status, int events) {
        Launcher *l = h->data;
        json_auto_t *j = launcher_recv(l);
        const char *unable = json_string_value(json_object_get(j, "unable"));

        if (json_integer_value(json_object_get(j, "ready")) == l->pid) {
                /* From now on the channel is used one request at a time, waiting for each answer. */
                uv_close((uv_handle_t *) l->poll, poll_close_cb);
                l->poll = NULL;
                l->state = LAUNCHER_READY;
                log_info("preloaded launcher %d (%s -m %s) is ready", (int) l->pid, l->key[0], l->key[1]);
                return;
        }
        if (unable) {
                char why[600];
                snprintf(why, sizeof why, "cannot preload: %s", unable);
                launcher_dead(l, why, PRELOAD_RETRY_USEC);
                return;
        }
        if (!j) {
                /* Its end: how it ended (an exit code, a signal) comes with its exit, which is the better message.
                 * One that closed the channel and lives on is still "importing" to every launch: they go cold. */
                uv_close((uv_handle_t *) l->poll, poll_close_cb);
                l->poll = NULL;
                return;
        }
        launcher_dead(l, "the launcher said something else than ready", PRELOAD_RETRY_USEC);
}

/* The key's first three rows; the environment follows. */
static int launcher_key(const SpawnParams *p, const char *module, char ***ret) {
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
 * the environment of the key, the channel as its descriptor 3. Its "ready" comes through the loop. */
static int launcher_start(Launcher *l) {
        char *argv[] = { l->key[0], l->pool->script, l->key[1], NULL };
        int sv[2], r;
        _cleanup_free_ char *err = NULL;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        SpawnParams p = {
                .argv = argv,
                .env = l->key + 3,
                .cwd = "/",
                .user = &l->user,
                .stdout_fd = STDERR_FILENO,
                .pass_fd = sv[1],
        };
        r = spawn_kernel(&p, &l->pid, &l->pidfd, &err);
        close(sv[1]);
        if (r < 0) {
                close(sv[0]);
                l->pid = 0;
                launcher_dead(l, err ?: strerror(-r), PRELOAD_RETRY_USEC);
                return r;
        }
        l->sock = sv[0];
        l->poll = malloc(sizeof(uv_poll_t));
        if (!l->poll || uv_poll_init(l->pool->loop, l->poll, l->sock) < 0) {
                free(l->poll);
                l->poll = NULL;
                launcher_dead(l, "cannot watch the launcher", PRELOAD_RETRY_USEC);
                return -ENOMEM;
        }
        l->poll->data = l;
        uv_poll_start(l->poll, UV_READABLE, launcher_poll_cb);
        free(l->why);
        l->why = NULL;
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

/* The launcher's answer to one request: the kernel's pid (>0), or 0 and *ret_cold. */
static pid_t launcher_answer(Launcher *l, int gofd, char **ret_cold) {
        json_auto_t *j = NULL;
        const char *s;
        json_int_t pid;
        int k;

        do
                k = poll(&(struct pollfd){ .fd = l->sock, .events = POLLIN }, 1, PRELOAD_REPLY_MSEC);
        while (k < 0 && errno == EINTR);
        if (k == 0) {
                launcher_dead(l, "the launcher did not answer within 3 s", PRELOAD_RETRY_USEC);
                *ret_cold = strdup(l->why);
                return 0;
        }
        j = launcher_recv(l);
        if ((s = json_string_value(json_object_get(j, "cold")))) {
                *ret_cold = strdup(s);
                return 0;
        }
        if ((s = json_string_value(json_object_get(j, "stale")))) {
                /* It ends itself; the next launch starts a fresh one at once. */
                char why[PATH_MAX + 128];
                snprintf(why, sizeof why, "the preloaded launcher is renewed: %s", s);
                launcher_dead(l, why, 0);
                *ret_cold = strdup(why);
                return 0;
        }
        pid = json_integer_value(json_object_get(j, "pid"));
        /* Never act on a pid the launcher names unless it is provably this launch's kernel: our child (its
         * intermediate parent gone) holding the pipe we made for it. */
        if (pid <= 0 || pid > INT32_MAX || proc_pid_ppid((pid_t) pid) != getpid() ||
            !pid_holds_pipe((pid_t) pid, gofd)) {
                launcher_dead(
                        l, j ? "the launcher named a process that is not the kernel it forked" : "the launcher ended",
                        PRELOAD_RETRY_USEC);
                *ret_cold = strdup(l->why);
                return 0;
        }
        return (pid_t) pid;
}

/* Ends the launcher used least recently when there are PRELOAD_LAUNCHERS_MAX. */
static void launchers_make_room(PreloadPool *pool) {
        Launcher **oldest = NULL;
        size_t n = 0;

        for (Launcher **l = &pool->launchers; *l; l = &(*l)->next, n++)
                if (!oldest || (*l)->used_at < (*oldest)->used_at)
                        oldest = l;
        if (n < PRELOAD_LAUNCHERS_MAX)
                return;
        Launcher *victim = *oldest;
        *oldest = victim->next;
        if (victim->pid > 0)
                log_info("preloaded launcher %d (%s -m %s): ended, the least recently used of %d", (int) victim->pid,
                         victim->key[0], victim->key[1], PRELOAD_LAUNCHERS_MAX);
        launcher_free(victim);
}

static Launcher *launcher_get(PreloadPool *pool, const SpawnParams *p, const char *module) {
        _cleanup_strv_free_ char **key = NULL;
        Launcher *l;

        if (launcher_key(p, module, &key) < 0)
                return NULL;
        l = launcher_find(pool, key);
        if (l) {
                l->used_at = now_usec(CLOCK_MONOTONIC);
                return l;
        }
        launchers_make_room(pool);
        l = calloc(1, sizeof *l);
        if (!l)
                return NULL;
        *l = (Launcher){ .pool = pool,
                         .key = TAKE_PTR(key),
                         .pidfd = -1,
                         .sock = -1,
                         .used_at = now_usec(CLOCK_MONOTONIC),
                         .next = pool->launchers };
        if (p->user && p->user->change) {
                l->user = (SpawnUser){ .change = true, .uid = p->user->uid, .gid = p->user->gid };
                l->user.n_groups = p->user->n_groups;
                l->user.groups = calloc((size_t) l->user.n_groups + 1, sizeof(gid_t));
                if (l->user.groups)
                        memcpy(l->user.groups, p->user->groups, sizeof(gid_t) * (size_t) l->user.n_groups);
                else {
                        launcher_free(l);
                        return NULL;
                }
        }
        pool->launchers = l;
        (void) launcher_start(l);
        return l;
}

static bool subreaper(void) {
        int on = 0;

        return getpid() == 1 || (prctl(PR_GET_CHILD_SUBREAPER, &on) >= 0 && on);
}

int preload_spawn(PreloadPool *pool, const SpawnParams *p, pid_t *ret_pid, int *ret_pidfd, char **ret_error,
                  char **ret_cold) {
        const char *module = argv_python_module(p->argv), *why;
        int gopipe[2], errpipe[2], r;
        pid_t pid;
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
        l = launcher_get(pool, p, module);
        if (!l)
                return -ENOMEM;
        why = launcher_why_not(l);
        if (why) {
                *ret_cold = strdup(why);
                return -EAGAIN;
        }
        if (pipe2(gopipe, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(errpipe, O_CLOEXEC) < 0) {
                close(gopipe[0]);
                close(gopipe[1]);
                return -errno;
        }
        r = launcher_send(l, p, gopipe[0], errpipe[1]);
        close(gopipe[0]);
        close(errpipe[1]);
        pid = r < 0 ? 0 : launcher_answer(l, gopipe[1], ret_cold);
        if (r < 0) {
                char why_send[160];
                snprintf(why_send, sizeof why_send, "cannot send the launch request: %s", strerror(-r));
                /* A request too large for it says nothing about the launcher. */
                if (r != -E2BIG && r != -EMSGSIZE)
                        launcher_dead(l, why_send, PRELOAD_RETRY_USEC);
                *ret_cold = strdup(why_send);
        }
        if (pid == 0) {
                /* Without its word a kernel that was forked exits before it runs anything. */
                close(gopipe[1]);
                close(errpipe[0]);
                return -EAGAIN;
        }
        r = spawn_finish(p, pid, errpipe[0], gopipe[1], PRELOAD_SETUP_MSEC, ret_pid, ret_pidfd, ret_error);
        if (r == -ETIMEDOUT)
                launcher_dead(l, "a kernel it forked did not finish its setup within 3 s", PRELOAD_RETRY_USEC);
        return r;
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
                if (l->state != LAUNCHER_DEAD)
                        log_warning("preloaded launcher %d (%s -m %s): %s", (int) pid, l->key[0], l->key[1], why);
                close(l->pidfd);
                l->pidfd = -1;
                l->pid = 0;
                launcher_dead(l, why, PRELOAD_RETRY_USEC);
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

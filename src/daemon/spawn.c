#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <poll.h>
#include <linux/close_range.h>

#include "spawn.h"
#include "util.h"

extern char **environ;

/* The limit we started with, for the kernels; unset until spawn_raise_nofile(). */
static struct rlimit nofile_orig;
static bool nofile_raised;

void spawn_raise_nofile(void) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
                return;
        nofile_orig = rl;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) >= 0)
                nofile_raised = true;
}

static int parse_id(const char *s, unsigned *ret) {
        unsigned long long v;
        int r = parse_uint(s, 0, (unsigned) -2, &v);

        if (r < 0)
                return r;
        *ret = (unsigned) v;
        return 0;
}

int spawn_user_resolve(const char *user, const char *group, SpawnUser *ret, char **ret_error) {
        SpawnUser u = { .uid = getuid(), .gid = getgid() };
        struct passwd pw, *pwp = NULL;
        struct group gr, *grp = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t bufsize = 16384;
        unsigned id;
        int r;

        buf = malloc(bufsize);
        if (!buf)
                return -ENOMEM;

        if (user) {
                if (parse_id(user, &id) >= 0)
                        r = getpwuid_r((uid_t) id, &pw, buf, bufsize, &pwp);
                else
                        r = getpwnam_r(user, &pw, buf, bufsize, &pwp);
                if (r != 0 || !pwp) {
                        if (asprintf(ret_error, "user '%s' does not exist", user) < 0)
                                *ret_error = NULL;
                        return -ESRCH;
                }
                u.change = true;
                u.uid = pw.pw_uid;
                u.gid = pw.pw_gid;
                u.name = strdup(pw.pw_name);
                u.home = strdup(pw.pw_dir);
                u.shell = strdup(pw.pw_shell);
                if (!u.name || !u.home || !u.shell)
                        goto oom;
        }
        if (group) {
                if (parse_id(group, &id) >= 0)
                        r = getgrgid_r((gid_t) id, &gr, buf, bufsize, &grp);
                else
                        r = getgrnam_r(group, &gr, buf, bufsize, &grp);
                if (r != 0 || !grp) {
                        if (asprintf(ret_error, "group '%s' does not exist", group) < 0)
                                *ret_error = NULL;
                        spawn_user_done(&u);
                        return -ESRCH;
                }
                u.change = true;
                u.gid = gr.gr_gid;
        }
        if (u.change) {
                int n = 32;
                for (;;) {
                        gid_t *g = realloc(u.groups, sizeof(gid_t) * (size_t) n);
                        if (!g)
                                goto oom;
                        u.groups = g;
                        if (!u.name) {
                                /* Only a group was given: no supplementary groups. */
                                n = 1;
                                u.groups[0] = u.gid;
                                break;
                        }
                        if (getgrouplist(u.name, u.gid, u.groups, &n) >= 0)
                                break;
                        /* n now holds the number needed. */
                }
                u.n_groups = n;
        }
        *ret = u;
        return 0;
oom:
        spawn_user_done(&u);
        return -ENOMEM;
}

void spawn_user_done(SpawnUser *u) {
        free(u->groups);
        free(u->name);
        free(u->home);
        free(u->shell);
        *u = (SpawnUser){ 0 };
}

static bool env_is_private(const char *e) {
        static const char *const names[] = {
                "NOTIFY_SOCKET",
                "WATCHDOG_USEC",
                "WATCHDOG_PID",
                "LISTEN_FDS",
                "LISTEN_PID",
                "LISTEN_FDNAMES",
                "JPY_PARENT_PID",
                "KERNELSUP_SOCKET",
                "KERNELSUP_PRELOAD_SCRIPT",
                "KERNELSUP_PRELOAD_READY_MSEC",
                "KERNELSUP_PRELOAD_REPLY_MSEC",
        };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                size_t n = strlen(names[i]);
                if (strncmp(e, names[i], n) == 0 && e[n] == '=')
                        return true;
        }
        return false;
}

int spawn_env_build(const SpawnUser *u, char *const *extra, char ***ret) {
        _cleanup_strv_free_ char **v = NULL;
        size_t n = 0;
        int r;

        for (char **e = environ; *e; e++)
                if (!env_is_private(*e) && (r = strv_env_set(&v, &n, strdup(*e))) < 0)
                        return r;
        if (u && u->name) {
                const char *pairs[][2] = {
                        { "USER", u->name },
                        { "LOGNAME", u->name },
                        { "HOME", u->home },
                        { "SHELL", u->shell },
                };
                for (size_t i = 0; i < ELEMENTSOF(pairs); i++) {
                        char *s;
                        if (asprintf(&s, "%s=%s", pairs[i][0], pairs[i][1]) < 0)
                                return -ENOMEM;
                        r = strv_env_set(&v, &n, s);
                        if (r < 0)
                                return r;
                }
        }
        for (char *const *e = extra; e && *e; e++)
                if ((r = strv_env_set(&v, &n, strdup(*e))) < 0)
                        return r;
        /* Never NULL, even when nothing is set. */
        if (!v && !(v = calloc(1, sizeof(char *))))
                return -ENOMEM;
        *ret = TAKE_PTR(v);
        return 0;
}

/* The child: only async-signal-safe calls from here to execve. */
_Noreturn static void child_exec(const SpawnParams *p, int devnull, int errfd, int gofd) {
        const SpawnUser *u = p->user;
        sigset_t all;
        int step, e;

        /* Signal handling is inherited across exec for ignored signals and the mask. */
        for (int sig = 1; sig < _NSIG; sig++)
                (void) signal(sig, SIG_DFL);
        sigemptyset(&all);
        (void) sigprocmask(SIG_SETMASK, &all, NULL);

        step = 1;
        if (setsid() < 0)
                goto fail;
        if (nofile_raised)
                (void) setrlimit(RLIMIT_NOFILE, &nofile_orig);
        step = 2;
        if (dup2(devnull, STDIN_FILENO) < 0 || dup2(p->stdout_fd, STDOUT_FILENO) < 0 ||
            dup2(p->stdout_fd, STDERR_FILENO) < 0)
                goto fail;
        /* A launcher's channel to us (preload.c) is its descriptor 3, the one left open across exec. */
        if (p->pass_fd > STDERR_FILENO && (p->pass_fd == 3 ? fcntl(3, F_SETFD, 0) : dup2(p->pass_fd, 3)) < 0)
                goto fail;
        if (u && u->change) {
                step = 3;
                if (setgroups((size_t) u->n_groups, u->groups) < 0)
                        goto fail;
                step = 4;
                if (setresgid(u->gid, u->gid, u->gid) < 0)
                        goto fail;
                step = 5;
                if (setresuid(u->uid, u->uid, u->uid) < 0)
                        goto fail;
        }
        step = 6;
        if (chdir(p->cwd ?: "/") < 0)
                goto fail;
        /* Every other descriptor closes at exec; errfd must live until then. */
        step = 7;
        if (close_range(p->pass_fd > STDERR_FILENO ? 4 : 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
                goto fail;
        /* Wait until the parent has placed us (a cgroup, limits): one byte, or EOF if it died. */
        if (gofd >= 0) {
                char go;
                ssize_t k;
                do
                        k = read(gofd, &go, 1);
                while (k < 0 && errno == EINTR);
                if (k != 1)
                        _exit(127);
        }
        step = 8;
        execve(p->argv[0], p->argv, p->env);
fail:
        e = errno;
        {
                int msg[2] = { step, e };
                (void) !write(errfd, msg, sizeof msg);
        }
        _exit(127);
}

static const char *step_name(int step) {
        switch (step) {
        case 1:
                return "setsid";
        case 2:
                return "dup2";
        case 3:
                return "setgroups";
        case 4:
                return "setgid";
        case 5:
                return "setuid";
        case 6:
                return "chdir";
        case 7:
                return "close_range";
        default:
                return "exec";
        }
}

/* Reads the child's report through errfd (closing it): 0 once it has exec'd (EOF), else the negative
 * errno with *ret_error naming the step. */
static int exec_result(int errfd, const char *exe, const char *cwd, int timeout_msec, char **ret_error) {
        int msg[2];
        ssize_t k;

        if (timeout_msec >= 0 && poll(&(struct pollfd){ .fd = errfd, .events = POLLIN }, 1, timeout_msec) == 0) {
                close(errfd);
                if (asprintf(ret_error, "its setup did not finish within %d ms", timeout_msec) < 0)
                        *ret_error = NULL;
                return -ETIMEDOUT;
        }
        do
                k = read(errfd, msg, sizeof msg);
        while (k < 0 && errno == EINTR);
        close(errfd);
        if (k != (ssize_t) sizeof msg)
                return 0;
        *ret_error = spawn_report_error(msg, exe, cwd);
        return -msg[1];
}

char *spawn_report_error(const int report[2], const char *exe, const char *cwd) {
        const char *what = report[0] == 6 ? cwd : report[0] == 8 ? exe : NULL;
        char *s;

        if (asprintf(&s, "%s%s%s: %s", step_name(report[0]), what ? " " : "", what ?: "", strerror(report[1])) < 0)
                return NULL;
        return s;
}

/* The caller signals the child's process group (kill(-pid)) from the moment spawn_kernel() returns; without
 * the wait for exec, that group may not exist yet. setsid() is the child's first step: wait for it, or for
 * the child to be gone, a moment at most. */
static void child_wait_session(pid_t pid) {
        for (int i = 0; i < 10000 && getpgid(pid) != pid; i++) {
                siginfo_t si = { 0 };
                if (waitid(P_PID, (id_t) pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == pid)
                        return;
                (void) usleep(100);
        }
}

int spawn_release(SpawnPending *sp, char **ret_error) {
        int r;

        (void) !write(sp->gofd, "g", 1);
        close(sp->gofd);
        r = sp->errfd < 0 ? 0 : exec_result(sp->errfd, sp->exe ?: "?", sp->cwd ?: "/", sp->timeout_msec, ret_error);
        free(sp->exe);
        free(sp->cwd);
        *sp = (SpawnPending){ .gofd = -1, .errfd = -1, .timeout_msec = -1 };
        return r;
}

void spawn_pending_drop(SpawnPending *sp) {
        if (sp->gofd < 0)
                return;
        close(sp->gofd);
        if (sp->errfd >= 0)
                close(sp->errfd);
        free(sp->exe);
        free(sp->cwd);
        *sp = (SpawnPending){ .gofd = -1, .errfd = -1, .timeout_msec = -1 };
}

int spawn_kernel(const SpawnParams *p, pid_t *ret_pid, int *ret_pidfd, char **ret_error) {
        _cleanup_close_ int devnull = -1;
        int errpipe[2], gopipe[2] = { -1, -1 };
        pid_t pid;

        devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0)
                return -errno;
        if (pipe2(errpipe, O_CLOEXEC) < 0)
                return -errno;
        if (p->prepare && pipe2(gopipe, O_CLOEXEC) < 0) {
                int e = errno;
                close(errpipe[0]);
                close(errpipe[1]);
                return -e;
        }

        pid = fork();
        if (pid < 0) {
                int e = errno;
                close(errpipe[0]);
                close(errpipe[1]);
                if (gopipe[0] >= 0) {
                        close(gopipe[0]);
                        close(gopipe[1]);
                }
                return -e;
        }
        if (pid == 0) {
                /* Or its own copy of the write end would keep it from seeing EOF when the parent drops it. */
                if (gopipe[1] >= 0)
                        close(gopipe[1]);
                child_exec(p, devnull, errpipe[1], gopipe[0]);
        }

        close(errpipe[1]);
        if (gopipe[0] >= 0)
                close(gopipe[0]);
        return spawn_finish(p, pid, errpipe[0], gopipe[1], -1, ret_pid, ret_pidfd, ret_error);
}

int spawn_finish(const SpawnParams *p, pid_t pid, int errfd, int gofd, int timeout_msec, pid_t *ret_pid,
                 int *ret_pidfd, char **ret_error) {
        _cleanup_close_ int pidfd = -1;
        int k;

        /* Nothing reaps in between: the loop's SIGCHLD handler runs only when we return. */
        pidfd = pidfd_open(pid, 0);
        if (pidfd < 0) {
                int e = errno;
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                if (errfd >= 0)
                        close(errfd);
                if (gofd >= 0)
                        close(gofd);
                return -e;
        }
        if (p->prepare) {
                int r = p->prepare(pid, p->userdata, ret_error);
                if (r < 0) {
                        /* Without its byte the child exits before exec; SIGKILL makes sure. */
                        close(gofd);
                        if (errfd >= 0)
                                close(errfd);
                        (void) pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
                        (void) waitid(P_PIDFD, (id_t) pidfd, &(siginfo_t){ 0 }, WEXITED);
                        return r;
                }
                if (r == SPAWN_DEFER) {
                        child_wait_session(pid);
                        *p->pending = (SpawnPending){ .gofd = gofd,
                                                      .errfd = errfd,
                                                      .timeout_msec = timeout_msec,
                                                      .exe = strdup(p->argv[0]),
                                                      .cwd = strdup(p->cwd ?: "/") };
                        *ret_pid = pid;
                        *ret_pidfd = TAKE_FD(pidfd);
                        return 0;
                }
        }
        if (gofd >= 0) {
                (void) !write(gofd, "g", 1);
                close(gofd);
        }
        k = errfd < 0 ? 0 : exec_result(errfd, p->argv[0], p->cwd ?: "/", timeout_msec, ret_error);
        if (k < 0) {
                (void) pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
                (void) waitid(P_PIDFD, (id_t) pidfd, &(siginfo_t){ 0 }, WEXITED);
                return k;
        }
        /* The fcntl flag is on already (pidfd_open sets O_CLOEXEC). */
        *ret_pid = pid;
        *ret_pidfd = TAKE_FD(pidfd);
        return 0;
}

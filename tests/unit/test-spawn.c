/* spawn_kernel's prepare step: when it refuses (the daemon could not write the kernel's pid to disk), the
 * child never execs and is reaped, and the caller gets prepare's error and message; when it accepts, the
 * child execs after it, with the pid prepare saw; when it defers, the child waits until spawn_release(). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"
#include "tap.h"
#include "util.h"

typedef struct Seen {
        pid_t pid;
        int calls;
        int answer;
        bool marker_before; /* whether the marker existed while the child waited */
        const char *marker;
        SpawnPending *pending; /* for SPAWN_DEFER */
        const char *exe;       /* NULL: /bin/sh */
} Seen;

static int prepare(pid_t pid, void *userdata, char **ret_error) {
        Seen *s = userdata;

        s->pid = pid;
        s->calls++;
        s->marker_before = access(s->marker, F_OK) == 0;
        if (s->answer < 0)
                *ret_error = strdup("not launched: cannot write state file");
        return s->answer;
}

static int run(Seen *s, const char *marker, pid_t *ret_pid, int *ret_pidfd, char **ret_error) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "echo ran > %s", marker);
        char *argv[] = { (char *) (s->exe ?: "/bin/sh"), (char *) "-c", cmd, NULL };
        char *env[] = { NULL };
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        SpawnParams p = {
                .argv = argv,
                .env = env,
                .stdout_fd = devnull,
                .prepare = prepare,
                .userdata = s,
                .pending = s->pending,
        };
        int r = spawn_kernel(&p, ret_pid, ret_pidfd, ret_error);

        close(devnull);
        return r;
}

int main(void) {
        char dir[] = "/tmp/ks-test-spawn-XXXXXX", marker[600];
        char *err = NULL;
        pid_t pid = 0;
        int pidfd = -1, r, status;

        if (!mkdtemp(dir))
                skip_all("mkdtemp failed");
        snprintf(marker, sizeof marker, "%s/marker", dir);

        /* Refused: nothing runs. */
        Seen s = { .answer = -ENOSPC, .marker = marker };
        r = run(&s, marker, &pid, &pidfd, &err);
        is_int(r, -ENOSPC, "a refusing prepare: spawn_kernel returns its error");
        is_int(s.calls, 1, "prepare was called once");
        ok(s.pid > 0, "prepare saw the child's pid");
        is_str(err, "not launched: cannot write state file", "prepare's message comes back");
        ok(access(marker, F_OK) < 0, "the child never exec'd (no marker)");
        errno = 0;
        ok(waitpid(s.pid, &status, WNOHANG) < 0 && errno == ECHILD, "the child has been reaped already");
        ok(kill(s.pid, 0) < 0 && errno == ESRCH, "the child is gone");
        is_int(pid, 0, "*ret_pid untouched on refusal");
        is_int(pidfd, -1, "*ret_pidfd untouched on refusal");
        free(err);
        err = NULL;

        /* Accepted: the child execs after prepare, as the pid prepare saw. */
        s = (Seen){ .answer = 0, .marker = marker };
        r = run(&s, marker, &pid, &pidfd, &err);
        is_int(r, 0, "an accepting prepare: spawn_kernel succeeds");
        is_int(pid, s.pid, "the launched pid is the one prepare saw");
        ok(!s.marker_before, "the child had not exec'd while prepare ran");
        ok(pidfd >= 0, "a pidfd");
        is_int(waitpid(pid, &status, 0), pid, "the child exits");
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "with status 0");
        ok(access(marker, F_OK) == 0, "it exec'd (marker written)");
        if (pidfd >= 0)
                close(pidfd);

        /* Deferred: spawn_kernel returns with the child waiting; spawn_release lets it exec. */
        unlink(marker);
        SpawnPending sp = { .gofd = -1, .errfd = -1 };
        s = (Seen){ .answer = SPAWN_DEFER, .marker = marker, .pending = &sp };
        r = run(&s, marker, &pid, &pidfd, &err);
        is_int(r, 0, "a deferring prepare: spawn_kernel succeeds");
        ok(sp.gofd >= 0 && sp.errfd >= 0, "with a pending handle");
        ok(waitpid(pid, &status, WNOHANG) == 0 && access(marker, F_OK) < 0, "the child waits, not exec'd");
        is_int(spawn_release(&sp, &err), 0, "spawn_release: it exec'd");
        is_int(waitpid(pid, &status, 0), pid, "the released child exits");
        ok(access(marker, F_OK) == 0, "after exec (marker written)");
        is_int(sp.gofd, -1, "the handle is spent");
        if (pidfd >= 0)
                close(pidfd);

        /* Deferred, then the exec fails: spawn_release names it; the child is left to the pidfd. */
        s = (Seen){ .answer = SPAWN_DEFER, .marker = marker, .pending = &sp, .exe = "/nonexistent/kernel" };
        r = run(&s, marker, &pid, &pidfd, &err);
        is_int(spawn_release(&sp, &err), -ENOENT, "spawn_release of a missing program: -ENOENT");
        is_str(err, "exec /nonexistent/kernel: No such file or directory", "naming the step and the program");
        is_int(waitpid(pid, &status, 0), pid, "the child is not reaped by spawn_release");
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 127, "it exited 127");
        free(err);
        err = NULL;
        if (pidfd >= 0)
                close(pidfd);

        /* Deferred, then dropped: it exits before exec. */
        unlink(marker);
        s = (Seen){ .answer = SPAWN_DEFER, .marker = marker, .pending = &sp };
        r = run(&s, marker, &pid, &pidfd, &err);
        spawn_pending_drop(&sp);
        is_int(waitpid(pid, &status, 0), pid, "a dropped child exits");
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 127 && access(marker, F_OK) < 0,
           "with 127, never exec'd (no marker)");
        if (pidfd >= 0)
                close(pidfd);

        /* The kernel's environment: the daemon's minus its private variables, extra winning in place. */
        setenv("KS_TEST_FOO", "1", 1);
        setenv("NOTIFY_SOCKET", "/run/x", 1);
        char *extra[] = { (char *) "KS_TEST_FOO=2", (char *) "KS_TEST_BAR=3", (char *) "KS_TEST_BAR=4", NULL };
        char **env = NULL;
        int foo = 0, bar = 0, notify = 0;
        is_int(spawn_env_build(NULL, extra, &env), 0, "spawn_env_build succeeds");
        for (char **e = env; e && *e; e++) {
                foo += strncmp(*e, "KS_TEST_FOO=", 12) == 0 && streq(*e, "KS_TEST_FOO=2");
                foo += strncmp(*e, "KS_TEST_FOO=", 12) == 0 && !streq(*e, "KS_TEST_FOO=2") ? 100 : 0;
                bar += streq(*e, "KS_TEST_BAR=4") ? 1 : strncmp(*e, "KS_TEST_BAR=", 12) == 0 ? 100 : 0;
                notify += strncmp(*e, "NOTIFY_SOCKET=", 14) == 0;
        }
        is_int(foo, 1, "a daemon variable set again by extra: once, with extra's value");
        is_int(bar, 1, "a variable twice in extra: once, the later value");
        is_int(notify, 0, "the daemon's NOTIFY_SOCKET is not passed on");
        strv_free(env);

        unlink(marker);
        rmdir(dir);
        return tap_done();
}

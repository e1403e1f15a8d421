/* The scope request does not hold the loop: with a system bus that never answers (a socket nobody
 * accepts on), resources_apply_async() returns at once with the request pending, the loop goes on running
 * until the 10 s deadline, and then done comes with the fallbacks applied and a note; resources_release()
 * of a pending request means done never comes. The scope path runs only under systemd (sd_booted()):
 * the test makes it look booted in a mount namespace of its own, so it needs root. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "resources.h"
#include "tap.h"
#include "util.h"

typedef struct Run {
        Limits l;
        int done_calls;
        unsigned ticks_pending; /* loop iterations seen while the request was pending */
        uv_timer_t tick;
} Run;

static void done(Limits *l, void *userdata) {
        Run *run = userdata;

        (void) l;
        run->done_calls++;
        uv_timer_stop(&run->tick);
}

static void tick_cb(uv_timer_t *t) {
        Run *run = t->data;

        if (run->l.scope)
                run->ticks_pending++;
}

static pid_t waiting_child(void) {
        pid_t pid = fork();

        if (pid == 0) {
                pause();
                _exit(0);
        }
        return pid;
}

static int fake_systemd(const char *dir) {
        char path[600], env[700];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        /* sd_booted() looks for /run/systemd/system: only in this namespace. */
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") < 0 || mkdir("/run/systemd", 0755) < 0 ||
            mkdir("/run/systemd/system", 0755) < 0)
                return -errno;
        snprintf(path, sizeof path, "%s/bus", dir);
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 16) < 0)
                return -errno;
        snprintf(env, sizeof env, "unix:path=%s", path);
        setenv("DBUS_SYSTEM_BUS_ADDRESS", env, 1);
        return fd; /* kept open, never accepted on */
}

int main(void) {
        char dir[] = "/tmp/ks-test-scope-XXXXXX", path[600];
        ContextConfig cc = { .memory_max = 256 * 1024 * 1024 };
        uv_loop_t loop;
        Run run = { 0 };
        pid_t pid;
        int r;

        if (getuid() != 0)
                skip_all("needs root (a mount namespace in which systemd looks booted)");
        if (!mkdtemp(dir))
                skip_all("mkdtemp failed");
        if (fake_systemd(dir) < 0)
                skip_all("cannot make a mount namespace with /run/systemd/system");
        uv_loop_init(&loop);
        uv_timer_init(&loop, &run.tick);
        run.tick.data = &run;

        /* Pending until the deadline; the loop runs meanwhile. */
        pid = waiting_child();
        uv_timer_start(&run.tick, tick_cb, 50, 50);
        r = resources_apply_async(&loop, &cc, "t", pid, &run.l, done, &run);
        is_int(r, 1, "with systemd booted, the scope is asked for: pending");
        ok(run.l.scope != NULL, "the request is held in the limits");
        is_int(run.done_calls, 0, "done is not called from within resources_apply_async()");
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(run.done_calls, 1, "done is called once, when systemd did not answer in time");
        ok(run.ticks_pending > 1, "the loop kept running while the request was pending (%u ticks)", run.ticks_pending);
        ok(run.l.scope == NULL, "the request is gone after done");
        ok(run.l.mechanism != LIMITS_SYSTEMD && run.l.unit == NULL, "no scope is claimed");
        ok(run.l.memory && (run.l.mechanism == LIMITS_CGROUP || run.l.mechanism == LIMITS_RLIMIT),
           "the fallbacks applied the memory limit (mechanism %d)", (int) run.l.mechanism);
        diag(run.l.note ?: "(no note)");
        resources_release(&run.l);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);

        /* Released while pending: done never comes, and the loop has nothing left of it. */
        pid = waiting_child();
        run = (Run){ .tick = run.tick };
        r = resources_apply_async(&loop, &cc, "t", pid, &run.l, done, &run);
        is_int(r, 1, "a second request is pending");
        uv_run(&loop, UV_RUN_NOWAIT);
        resources_release(&run.l);
        uv_close((uv_handle_t *) &run.tick, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(run.done_calls, 0, "done is never called for a request released while pending");
        is_int(uv_loop_close(&loop), 0, "no handle of the request is left on the loop");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);

        snprintf(path, sizeof path, "%s/bus", dir);
        unlink(path);
        rmdir(dir);
        return tap_done();
}

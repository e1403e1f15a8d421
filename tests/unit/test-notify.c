/* notify_restart_job(): whether systemd runs a restart job for a unit, asked with ListJobs. A fake systemd
 * (an sd-bus server in a child, on a socket of the test's own) answers with a restart job, a start job, an
 * error, or a reply of another signature; a socket that never answers and a missing one show that the
 * SIGTERM path cannot hang: the answer is an error within the timeout (connection and authentication
 * included). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "notify.h"
#include "tap.h"
#include "util.h"

#define UNIT "kernel.service"
#define TIMEOUT_USEC (300 * USEC_PER_MSEC)

/* ListJobs: another unit's restart job first (so the unit must match), then ours of the child's type. */
static int on_call(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *type = userdata;
        sd_bus_message *reply = NULL;
        int r;

        (void) error;
        if (!sd_bus_message_is_method_call(m, "org.freedesktop.systemd1.Manager", "ListJobs"))
                return 0;
        if (streq(type, "error"))
                return sd_bus_reply_method_errorf(m, "org.freedesktop.DBus.Error.AccessDenied", "not for you");
        if (streq(type, "garbage"))
                return sd_bus_reply_method_return(m, "s", "restart");
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "a(usssoo)", 2, 1, "other.service", "restart", "running",
                                          "/org/freedesktop/systemd1/job/1",
                                          "/org/freedesktop/systemd1/unit/other_2eservice", 2, UNIT, type, "running",
                                          "/org/freedesktop/systemd1/job/2",
                                          "/org/freedesktop/systemd1/unit/kernel_2eservice");
        if (r >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        sd_bus_message_unref(reply);
        return r < 0 ? r : 1;
}

/* Serves one connection on lfd as PID 1 would on /run/systemd/private, then exits. */
static void serve(int lfd, const char *type) {
        sd_bus *bus = NULL;
        sd_id128_t id;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), r;

        if (fd < 0)
                _exit(1);
        r = sd_id128_randomize(&id);
        if (r >= 0)
                r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_fd(bus, fd, fd);
        if (r >= 0)
                r = sd_bus_set_server(bus, 1, id);
        if (r >= 0)
                r = sd_bus_add_object(bus, NULL, "/org/freedesktop/systemd1", on_call, (void *) type);
        if (r >= 0)
                r = sd_bus_start(bus);
        while (r >= 0) {
                r = sd_bus_process(bus, NULL);
                if (r == 0)
                        r = sd_bus_wait(bus, UINT64_MAX);
        }
        _exit(0);
}

static int listen_at(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        (void) unlink(path);
        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 8) < 0) {
                perror(path);
                exit(1);
        }
        return fd;
}

/* The query against a fake systemd whose job for UNIT has type (or that answers with an error). */
static int ask_fake(const char *dir, const char *type) {
        char path[512], address[600];
        pid_t child;
        int lfd, r;

        snprintf(path, sizeof path, "%s/private", dir);
        snprintf(address, sizeof address, "unix:path=%s", path);
        lfd = listen_at(path);
        child = fork();
        if (child == 0)
                serve(lfd, type);
        close(lfd);
        r = notify_restart_job(address, UNIT, 10 * USEC_PER_SEC);
        (void) kill(child, SIGKILL);
        (void) waitpid(child, NULL, 0);
        return r;
}

int main(void) {
        char dir[] = "/tmp/ks-notify-XXXXXX", path[512], address[600];
        usec_t t0, took;
        int lfd, r;

        if (!mkdtemp(dir))
                return perror("mkdtemp"), 1;

        is_int(ask_fake(dir, "restart"), 1, "a restart job of the unit: 1");
        is_int(ask_fake(dir, "start"), 0, "only a start job of the unit (another unit restarts): 0");
        r = ask_fake(dir, "error");
        ok(r < 0, "systemd answers with an error: an error (%d)", r);
        r = ask_fake(dir, "garbage");
        ok(r < 0, "an answer of another signature: an error (%d)", r);

        /* Listening, never accepting: the connection completes in the backlog and nobody authenticates us. */
        snprintf(path, sizeof path, "%s/silent", dir);
        snprintf(address, sizeof address, "unix:path=%s", path);
        lfd = listen_at(path);
        t0 = now_usec(CLOCK_MONOTONIC);
        r = notify_restart_job(address, UNIT, TIMEOUT_USEC);
        took = now_usec(CLOCK_MONOTONIC) - t0;
        is_int(r, -ETIMEDOUT, "a socket that never answers: -ETIMEDOUT");
        /* A bound, not a speed goal: a query that waits for the peer would never return at all. */
        ok(took >= TIMEOUT_USEC && took < 10 * TIMEOUT_USEC,
           "it returns after its timeout (%llu ms for a %llu ms one)", took / USEC_PER_MSEC,
           TIMEOUT_USEC / USEC_PER_MSEC);
        close(lfd);

        snprintf(address, sizeof address, "unix:path=%s/none", dir);
        r = notify_restart_job(address, UNIT, TIMEOUT_USEC);
        ok(r < 0 && r != -ETIMEDOUT, "no socket: an error at once (%d)", r);

        (void) unlink(path);
        snprintf(path, sizeof path, "%s/private", dir);
        (void) unlink(path);
        (void) rmdir(dir);
        return tap_done();
}

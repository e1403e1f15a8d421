#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-login.h>
#include <time.h>

#include "notify.h"
#include "util.h"

struct Notify {
        uv_timer_t watchdog;
        usec_t watchdog_usec;
        char *status;
};

static void watchdog_cb(uv_timer_t *t) {
        (void) sd_notify(0, "WATCHDOG=1");
}

int notify_new(uv_loop_t *loop, Notify **ret) {
        Notify *n = calloc(1, sizeof *n);
        uint64_t usec = 0;
        int r;

        if (!n)
                return -ENOMEM;
        uv_timer_init(loop, &n->watchdog);
        n->watchdog.data = n;
        /* unset_environment = 0: NOTIFY_SOCKET is still needed by sd_notify;
         * spawn.c drops all of these from the kernels' environment. */
        r = sd_watchdog_enabled(0, &usec);
        if (r > 0 && usec > 0) {
                n->watchdog_usec = usec;
                uv_timer_start(&n->watchdog, watchdog_cb, 0, (usec / 2) / USEC_PER_MSEC ?: 1);
        }
        *ret = n;
        return 0;
}

static void notify_close_cb(uv_handle_t *h) {
        Notify *n = h->data;

        free(n->status);
        free(n);
}

void notify_free(Notify *n) {
        if (!n)
                return;
        uv_timer_stop(&n->watchdog);
        uv_close((uv_handle_t *) &n->watchdog, notify_close_cb);
}

void notify_ready(Notify *n, const char *status) {
        free(n->status);
        n->status = strdup(status);
        (void) sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_status(Notify *n, const char *status) {
        if (n->status && streq(n->status, status))
                return;
        free(n->status);
        n->status = strdup(status);
        (void) sd_notifyf(0, "STATUS=%s", status);
}

void notify_stopping(Notify *n) {
        (void) sd_notify(0, "STOPPING=1");
}

void notify_reloading(Notify *n) {
        /* systemd 253 wants MONOTONIC_USEC with RELOADING=1 for Type=notify-reload;
         * 252 ignores it. */
        (void) sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu", now_usec(CLOCK_MONOTONIC));
}

int notify_listen_fd(void) {
        int n = sd_listen_fds(1);

        if (n <= 0)
                return -1;
        /* More than one passed socket is a unit mistake; use the first. */
        return SD_LISTEN_FDS_START;
}

/* ---- Whether systemd restarts us ---- */

/* PID 1's own socket, which root's systemctl uses: peer to peer, so it answers without a D-Bus daemon. */
#define SYSTEMD_PRIVATE_BUS "unix:path=/run/systemd/private"

typedef struct JobQuery {
        const char *unit;
        int result; /* 1, 0 or -errno once answered; -EINPROGRESS until then */
} JobQuery;

/* ListJobs' reply, a(usssoo): id, unit, type, state, job path, unit path. While systemd runs the stop half
 * of a restart, the unit's job is still of type "restart" (it becomes "start" once the stop is done). */
static int on_list_jobs(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        JobQuery *q = userdata;
        const char *unit, *type, *state, *job, *unit_path;
        uint32_t id;
        int r;

        (void) error;
        if (sd_bus_message_is_method_error(m, NULL)) {
                q->result = -sd_bus_message_get_errno(m) ?: -EIO;
                return 0;
        }
        q->result = 0;
        r = sd_bus_message_enter_container(m, 'a', "(usssoo)");
        while (r >= 0 && (r = sd_bus_message_read(m, "(usssoo)", &id, &unit, &type, &state, &job, &unit_path)) > 0)
                if (streq(unit, q->unit) && streq(type, "restart"))
                        q->result = 1;
        if (r < 0)
                q->result = r;
        return 0;
}

int notify_restart_job(const char *address, const char *unit, usec_t timeout) {
        _cleanup_(sd_bus_close_unrefp) sd_bus *bus = NULL;
        JobQuery q = { .unit = unit, .result = -EINPROGRESS };
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + timeout, now;
        int r;

        /* The connection and its authentication run in the loop below too (sd_bus_start() only begins a
         * non-blocking connect), so the deadline bounds them as well as the call. */
        r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_address(bus, address);
        if (r >= 0)
                r = sd_bus_set_method_call_timeout(bus, timeout);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r >= 0)
                r = sd_bus_call_method_async(bus, NULL, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                             "org.freedesktop.systemd1.Manager", "ListJobs", on_list_jobs, &q, NULL);
        while (r >= 0 && q.result == -EINPROGRESS) {
                r = sd_bus_process(bus, NULL);
                if (r != 0)
                        continue;
                now = now_usec(CLOCK_MONOTONIC);
                r = now < deadline ? sd_bus_wait(bus, deadline - now) : -ETIMEDOUT;
        }
        return r < 0 ? r : q.result;
}

int notify_restart_queued(usec_t timeout, char **ret_unit) {
        _cleanup_free_ char *unit = NULL;
        int r;

        r = sd_pid_get_unit(0, &unit);
        if (r < 0)
                return r;
        r = notify_restart_job(SYSTEMD_PRIVATE_BUS, unit, timeout);
        if (ret_unit)
                *ret_unit = TAKE_PTR(unit);
        return r;
}

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
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

/* Talking to the service manager: sd_notify messages, the watchdog, and the
 * control socket systemd may pass. All are no-ops without systemd. */
#pragma once

#include <stdbool.h>
#include <uv.h>

#include "macro.h"

typedef struct Notify Notify;

/* Reads (and unsets, so kernels never inherit them) NOTIFY_SOCKET's watchdog
 * settings; starts a loop timer sending WATCHDOG=1 at half the interval when
 * WATCHDOG_USEC is set for us. The timer lives in the loop, so a stuck loop
 * stops the pings and systemd's watchdog fires. */
int notify_new(uv_loop_t *loop, Notify **ret);
void notify_free(Notify *n); /* stops the timer; frees after its close callback */

void notify_ready(Notify *n, const char *status);
void notify_status(Notify *n, const char *status); /* sent only when it changed */
void notify_stopping(Notify *n);
void notify_reloading(Notify *n);

/* Whether systemd has a restart job running for our own unit (systemctl restart, an upgrade's
 * deb-systemd-invoke restart): then its SIGTERM is the stop half of a restart. Asks PID 1 on its private
 * socket (root only, no D-Bus daemon needed), connection and reply within timeout. 1: a restart, 0: no
 * restart job, -errno: not a unit of a systemd we can reach, or no answer in time. *ret_unit (may be NULL)
 * is our unit's name, set whenever it is known. */
int notify_restart_queued(usec_t timeout, char **ret_unit);
/* The query itself, on the bus at address (a D-Bus address, "unix:path=..."), for unit: the same results. */
int notify_restart_job(const char *address, const char *unit, usec_t timeout);

/* The one socket systemd passed (LISTEN_FDS, unset afterwards), or -1. */
int notify_listen_fd(void);

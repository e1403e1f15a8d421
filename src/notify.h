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

/* The one socket systemd passed (LISTEN_FDS, unset afterwards), or -1. */
int notify_listen_fd(void);

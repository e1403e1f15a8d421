/* What the parts of the control methods share (handlers.c, handlers-access.c, handlers-cells.c). Private to
 * src/daemon/handlers*.c. */
#pragma once

#include <jansson.h>

#include "context.h"
#include "control.h"
#include "handlers.h"

#define N_METHODS 14 /* the rows of methods[] */

struct Handlers {
        HandlersHost host;
        struct Waiter *waiters;           /* control requests waiting for a state */
        ControlMethod control[N_METHODS]; /* the table as the control server takes it: every row dispatched here */
};

/* handlers-access.c */
/* The context of that name, whoever may see it; NULL when there is none. */
Context *handlers_find(Handlers *h, const char *name);
/* Root and the daemon's own uid: they see every context and the daemon-wide metrics. */
bool handlers_peer_privileged(const ControlPeer *peer);
/* The context named in params, answering the request with an error (and NULL) when there is none, the peer may not
 * see it, or the daemon is shutting down. */
Context *handlers_request_context(Handlers *h, ControlRequest *req, json_t *params);

/* The methods of cells (handlers-cells.c), rows of the table in handlers.c. */
void method_execute(ControlRequest *req, json_t *params, void *userdata);
void method_history(ControlRequest *req, json_t *params, void *userdata);
void method_interrupt(ControlRequest *req, json_t *params, void *userdata);

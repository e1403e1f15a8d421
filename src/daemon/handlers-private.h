/* What the parts of the control methods share (handlers.c, handlers-cells.c). Private to src/daemon/handlers*.c. */
#pragma once

#include <jansson.h>

#include "context.h"
#include "control.h"
#include "handlers.h"

/* The context named in params, answering the request with an error (and NULL) when there is none, the peer may not
 * see it, or the daemon is shutting down. */
Context *handlers_request_context(Handlers *h, ControlRequest *req, json_t *params);

/* The methods of cells (handlers-cells.c), rows of the table in handlers.c. */
void method_execute(ControlRequest *req, json_t *params, void *userdata);
void method_history(ControlRequest *req, json_t *params, void *userdata);
void method_interrupt(ControlRequest *req, json_t *params, void *userdata);

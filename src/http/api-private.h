/* What the files of the native API share. */
#pragma once

#include "api.h"

/* POST /v1/contexts/NAME/execute; GET /v1/executions[?context=], GET and DELETE /v1/executions/ID, GET
 * /v1/executions/ID/events (api-exec.c). */
void api_route_execute(HttpRequest *r, char **args);
void api_route_executions(HttpRequest *r, char **args);
void api_route_execution(HttpRequest *r, char **args);
void api_route_cancel(HttpRequest *r, char **args);
void api_route_events(HttpRequest *r, char **args);

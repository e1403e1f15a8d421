/* The routes of kernelsup-http: the native API (/v1, doc/openapi.yaml) in api.c, E2B's in e2b.c. */
#pragma once

#include "http.h"

extern const HttpRoute api_v1_routes[];
extern const size_t api_v1_n_routes;

/* For routes that answer with what the daemon answered: calls method with params (stolen) and answers its result
 * (200) or its error. */
void api_proxy(HttpRequest *r, const char *method, json_t *params);

/* params for a context's request: {"context": name}, with the body's "timeout" when it has one (a number). NULL after
 * answering (a bad body, out of memory). */
json_t *api_context_params(HttpRequest *r, const char *name);

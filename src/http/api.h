/* The routes of kernelsup-http: the native API (/v1, doc/openapi.yaml) in api.c, E2B's in e2b.c. */
#pragma once

#include "http.h"

extern const HttpRoute api_v1_routes[];
extern const size_t api_v1_n_routes;
/* E2B's code-interpreter routes (doc/e2b-protocol.md), at the root: /health, /execute, /contexts. */
extern const HttpRoute e2b_routes[];
extern const size_t e2b_n_routes;

/* For routes that answer with what the daemon answered: calls method with params (stolen) and answers its result
 * (200) or its error. */
void api_proxy(HttpRequest *r, const char *method, json_t *params);

/* params for a context's request: {"context": name}, with the body's "timeout" when it has one (a number). NULL after
 * answering (a bad body, out of memory). */
json_t *api_context_params(HttpRequest *r, const char *name);

/* Adds context name with add's params (stolen; "kernel" may be missing when language names the kernelspec's
 * language: the first kernelspec of it is taken, else 400 no_such_language), then calls answer with the reply to
 * status of the new context. Daemon errors are answered. Hangs its state on the request (http_request_data is not
 * NULL in answer). */
void api_context_add(HttpRequest *r, const char *name, const char *language, json_t *params, HttpCallDone answer);

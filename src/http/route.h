/* The path of a request, between what MHD parsed and the route it reaches (pure). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ROUTE_MAX_ARGS 4

/* Decodes %HH escapes in place, except %00 and %2F, which stay as they are written: a NUL cannot end a name early,
 * and an escaped '/' cannot make two segments of one. Returns the new length. MHD's unescape callback. */
size_t route_unescape(char *s);

/* Whether path matches pattern, segment by segment, each "*" of pattern matching one whole segment that is not
 * "", "." or ".." and holds no '%' (an escape route_unescape left). 1 with the matched segments in args (newly
 * allocated, NULL-terminated; the caller frees them with route_args_free), 0 when it does not match, -ENOMEM. */
int route_match(const char *pattern, const char *path, char *args[ROUTE_MAX_ARGS + 1]);
void route_args_free(char *args[ROUTE_MAX_ARGS + 1]);

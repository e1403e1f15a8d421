/* libFuzzer harness: the path of an HTTP request between what MHD parsed and the route it reaches (src/http/route.c),
 * for every pattern of kernelsup-http's tables. The input: a byte choosing the pattern, then the path as the client
 * sent it (before MHD's unescape, which is route_unescape). Properties: unescaping never lengthens the path nor makes
 * a NUL or a '/' of an escape; a match gives one argument per "*", none empty, ".", ".." or holding '/' or '%', and
 * the pattern with its "*"s replaced by them is the path; no leak. */
#include "fuzz-util.h"
#include "route.h"

/* The patterns of src/http/api.c and src/http/e2b.c (test-openapi.py checks those tables against the API's document).
 */
static const char *const patterns[] = {
        "/v1/status",
        "/v1/contexts",
        "/v1/contexts/*",
        "/v1/contexts/*/start",
        "/v1/contexts/*/stop",
        "/v1/contexts/*/restart",
        "/v1/contexts/*/interrupt",
        "/v1/contexts/*/check",
        "/v1/contexts/*/execute",
        "/v1/executions",
        "/v1/executions/*",
        "/v1/executions/*/events",
        "/health",
        "/execute",
        "/contexts",
        "/contexts/*",
        "/contexts/*/restart",
        "/*/*/*/*",
};
#define N_PATTERNS (sizeof patterns / sizeof patterns[0])

static void check_match(const char *pattern, const char *path) {
        char *args[ROUTE_MAX_ARGS + 1], rebuilt[8192];
        size_t n = 0, stars = 0, w = 0;
        int r = route_match(pattern, path, args);

        FUZZ_CHECK(r == 0 || r == 1 || r == -ENOMEM);
        if (r != 1) {
                for (size_t i = 0; i <= ROUTE_MAX_ARGS; i++)
                        FUZZ_CHECK(!args[i]);
                return;
        }
        for (const char *p = pattern; *p; p++)
                stars += *p == '*';
        for (; n <= ROUTE_MAX_ARGS && args[n]; n++) {
                const char *a = args[n];

                FUZZ_CHECK(*a && strcmp(a, ".") != 0 && strcmp(a, "..") != 0);
                FUZZ_CHECK(!strchr(a, '/') && !strchr(a, '%'));
        }
        FUZZ_CHECK(n == stars);
        /* The pattern with each "*" replaced by its argument is the path. */
        n = 0;
        for (const char *p = pattern; *p && w < sizeof rebuilt - 1; p++) {
                if (*p == '*') {
                        size_t k = strlen(args[n]);

                        if (w + k >= sizeof rebuilt)
                                break;
                        memcpy(rebuilt + w, args[n++], k);
                        w += k;
                } else
                        rebuilt[w++] = *p;
        }
        rebuilt[w] = '\0';
        if (strlen(path) < sizeof rebuilt - 1)
                FUZZ_CHECK(strcmp(rebuilt, path) == 0);
        route_args_free(args);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *path;
        size_t n, len, slashes;

        if (size < 1 || size > 4096)
                return 0;
        path = malloc(size);
        if (!path)
                return 0;
        memcpy(path, data + 1, size - 1);
        path[size - 1] = '\0';
        n = strlen(path); /* MHD hands over a C string: the path ends at its first NUL */
        slashes = 0;
        for (size_t i = 0; i < n; i++)
                slashes += path[i] == '/';
        len = route_unescape(path);
        FUZZ_CHECK(len <= n && len == strlen(path));
        for (size_t i = 0; i < len; i++)
                slashes -= path[i] == '/';
        FUZZ_CHECK(slashes == 0); /* an escaped '/' stays escaped: it never makes two segments of one */
        check_match(patterns[data[0] % N_PATTERNS], path);
        free(path);
        return 0;
}

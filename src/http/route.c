/* The path matching of route.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "util.h"

size_t route_unescape(char *s) {
        char *w = s;

        for (const char *p = s; *p; p++) {
                int hi, lo, v;

                if (p[0] == '%' && (hi = hex_digit_value(p[1])) >= 0 && (lo = hex_digit_value(p[2])) >= 0) {
                        v = hi * 16 + lo;
                        if (v != 0 && v != '/') {
                                *w++ = (char) v;
                                p += 2;
                                continue;
                        }
                }
                *w++ = *p;
        }
        *w = '\0';
        return (size_t) (w - s);
}

void route_args_free(char *args[ROUTE_MAX_ARGS + 1]) {
        for (size_t i = 0; i <= ROUTE_MAX_ARGS && args[i]; i++) {
                free(args[i]);
                args[i] = NULL;
        }
}

static bool segment_valid(const char *s, size_t n) {
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
                return false;
        return memchr(s, '%', n) == NULL;
}

int route_match(const char *pattern, const char *path, char *args[ROUTE_MAX_ARGS + 1]) {
        size_t n_args = 0;

        memset(args, 0, sizeof(char *) * (ROUTE_MAX_ARGS + 1));
        for (;;) {
                const char *pe, *se;
                size_t pn, sn;

                if (*pattern != '/' || *path != '/')
                        break;
                pattern++, path++;
                pe = strchrnul(pattern, '/');
                se = strchrnul(path, '/');
                pn = (size_t) (pe - pattern), sn = (size_t) (se - path);
                if (pn == 1 && pattern[0] == '*') {
                        if (!segment_valid(path, sn) || n_args == ROUTE_MAX_ARGS)
                                break;
                        args[n_args] = strndup(path, sn);
                        if (!args[n_args]) {
                                route_args_free(args);
                                return -ENOMEM;
                        }
                        n_args++;
                } else if (pn != sn || memcmp(pattern, path, pn) != 0)
                        break;
                pattern = pe, path = se;
                if (!*pattern && !*path)
                        return 1;
        }
        route_args_free(args);
        return 0;
}

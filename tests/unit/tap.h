/* A minimal TAP producer for unit tests (automake's tap-driver reads it).
 *   ok(cond, "name %d", i);  is_int(got, want, "name");  is_str(got, want, "name");
 *   skip_all("reason") exits 77.  return tap_done(); at the end of main. */
#pragma once

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

__attribute__((format(printf, 2, 3))) static inline int ok(int cond, const char *fmt, ...) {
        va_list ap;

        tap_n++;
        printf("%sok %d - ", cond ? "" : "not ", tap_n);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        if (!cond)
                tap_failed++;
        fflush(stdout);
        return cond;
}

#define is_int(got, want, ...)                                                                                        \
        ({                                                                                                            \
                long long _g = (long long) (got), _w = (long long) (want);                                            \
                int _ok = ok(_g == _w, __VA_ARGS__);                                                                  \
                if (!_ok)                                                                                             \
                        printf("#   got %lld, want %lld (%s:%d)\n", _g, _w, __FILE__, __LINE__);                      \
                _ok;                                                                                                  \
        })

#define is_str(got, want, ...)                                                                                        \
        ({                                                                                                            \
                const char *_g = (got), *_w = (want);                                                                 \
                int _ok = ok(_g && _w && strcmp(_g, _w) == 0, __VA_ARGS__);                                           \
                if (!_ok)                                                                                             \
                        printf("#   got \"%s\", want \"%s\" (%s:%d)\n", _g ? _g : "(null)", _w ? _w : "(null)",       \
                               __FILE__, __LINE__);                                                                   \
                _ok;                                                                                                  \
        })

static inline void diag(const char *s) {
        printf("# %s\n", s);
}

static inline void skip_all(const char *reason) {
        printf("1..0 # SKIP %s\n", reason);
        exit(77);
}

static inline int tap_done(void) {
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}

/* Small helpers in the style of systemd's macro.h: cleanup attributes and hand-off. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Take ownership of a pointer: returns it and leaves NULL behind, so the
 * cleanup handler of the source variable does nothing. */
#define TAKE_PTR(p)                                                                                                   \
        ({                                                                                                            \
                __typeof__(p) _p_ = (p);                                                                              \
                (p) = NULL;                                                                                           \
                _p_;                                                                                                  \
        })

#define TAKE_FD(fd)                                                                                                   \
        ({                                                                                                            \
                int _fd_ = (fd);                                                                                      \
                (fd) = -1;                                                                                            \
                _fd_;                                                                                                 \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

/* Closes fd if open; returns -1 to assign back. */
static inline int safe_close(int fd) {
        if (fd >= 0)
                closep(&fd);
        return -1;
}

/* Free a NULL-terminated vector of strings. */
static inline void strv_free(char **v) {
        if (!v)
                return;
        for (char **s = v; *s; s++)
                free(*s);
        free(v);
}
static inline void strv_freep(char ***v) {
        strv_free(*v);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)

#define streq(a, b) (strcmp((a), (b)) == 0)

/* Equal strings, or both NULL. */
static inline int streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return streq(a, b);
}

typedef unsigned long long usec_t;
#define USEC_PER_SEC 1000000ULL
#define USEC_PER_MSEC 1000ULL
#define USEC_INFINITY ((usec_t) -1)

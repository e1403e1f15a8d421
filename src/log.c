#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

int log_max_level = LOG_INFO;

void log_internal(int level, int error, const char *fmt, ...) {
        char buf[2048];
        va_list ap;

        errno = error; /* so %m names the error we were given */
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        fprintf(stderr, "<%d>%s\n", level, buf);
}

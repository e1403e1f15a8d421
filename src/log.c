#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

int log_max_level = LOG_INFO;

/* Under journald (JOURNAL_STREAM set) each line carries its sd-daemon
 * priority prefix, so levels survive; on a terminal the prefix would be noise. */
static int use_prefix = -1;

void log_internal(int level, int error, const char *fmt, ...) {
        static const char *const names[] = { "emergency: ", "alert: ", "critical: ", "error: ", "warning: " };
        char buf[4096];
        va_list ap;

        if (use_prefix < 0)
                use_prefix = getenv("JOURNAL_STREAM") != NULL;
        errno = error; /* so %m names the error we were given */
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (use_prefix)
                fprintf(stderr, "<%d>%s\n", level, buf);
        else
                fprintf(stderr, "%s%s\n", level <= LOG_WARNING ? names[level] : "", buf);
}

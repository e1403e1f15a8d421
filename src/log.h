/* Logging to stderr with sd-daemon priority prefixes, so journald keeps the
 * levels. Only main, supervisor and control log; helpers return -errno. */
#pragma once

#include <syslog.h>

#include "macro.h"

extern int log_max_level;

void log_internal(int level, int error, const char *fmt, ...) _printf_(3, 4);

#define log_full_errno(level, error, ...)                                                                             \
        ({                                                                                                            \
                int _e_ = (error) < 0 ? -(error) : (error);                                                           \
                if ((level) <= log_max_level)                                                                         \
                        log_internal((level), _e_, __VA_ARGS__);                                                      \
                -_e_;                                                                                                 \
        })

/* The *_errno forms set errno for %m and return the negative error. */
#define log_error_errno(error, ...) log_full_errno(LOG_ERR, (error), __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, (error), __VA_ARGS__)
#define log_error(...) ((void) log_full_errno(LOG_ERR, 0, __VA_ARGS__))
#define log_warning(...) ((void) log_full_errno(LOG_WARNING, 0, __VA_ARGS__))
#define log_notice(...) ((void) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__))
#define log_info(...) ((void) log_full_errno(LOG_INFO, 0, __VA_ARGS__))
#define log_debug(...) ((void) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__))

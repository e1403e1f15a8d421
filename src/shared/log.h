/* Logging to stderr with sd-daemon priority prefixes, so journald keeps the
 * levels. Only main, supervisor and control log; helpers return -errno. */
#pragma once

#include <stdint.h>
#include <sys/types.h>
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

/* Events that matter to whoever watches many daemons: one journal entry each
 * under journald, with a MESSAGE_ID (documented in catalog/kernelsup.catalog,
 * for journalctl -x) and KERNELSUP_* fields; elsewhere the same readable line
 * on stderr as log_info and friends write. */
#define LOG_ID_KERNEL_STARTED "b675c18541a146ea80e8363931592a0a"
#define LOG_ID_KERNEL_READY "abd8406c81a34d4eab7e1a58a7d0e8f7"
#define LOG_ID_KERNEL_DIED "8695e72080884b10b77fff8a7b566899"
#define LOG_ID_KERNEL_RESTARTING "f91625f728bf408ebb62f79158f2367a"
#define LOG_ID_KERNEL_FAILED "22d4d93b6b6c41fbb0e2dff59c3dacd4"
#define LOG_ID_KERNEL_ADOPTED "1e5a246a07604eeab3da3729582f5781"
#define LOG_ID_KERNEL_NOT_ADOPTED "7a0613f8b5934353bf1e614310ae56fe"
#define LOG_ID_KERNEL_STOPPED "734cb846c3d74ea5ad66a536fa0e18cd"
#define LOG_ID_RELOAD_APPLIED "9d177a05d34a4a7daced8f6b31162af6"
#define LOG_ID_FREEZE_DETECTED "0b1b8da2b0c146dd900ec9fff6f5075b"
#define LOG_ID_CONNECTION_REFUSED "b2ef027ee151482f9febe16260d22701"

/* An event's fields; NULL and 0 are left out. Borrowed for the call. */
typedef struct LogEvent {
        const char *message_id; /* one of LOG_ID_* */
        const char *context;    /* KERNELSUP_CONTEXT= */
        const char *kernel_id;  /* KERNELSUP_KERNEL_ID= */
        uint64_t incarnation;   /* KERNELSUP_INCARNATION= */
        const char *reason;     /* KERNELSUP_REASON=: one word or a short phrase, for matching */
        pid_t pid;              /* KERNELSUP_PID=: the kernel's (or the control peer's) */
        const char *extra;      /* one more FIELD=value, e.g. KERNELSUP_EXIT_STATUS=3 */
} LogEvent;

void log_event(int level, const LogEvent *ev, const char *fmt, ...) _printf_(3, 4);

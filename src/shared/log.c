#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <systemd/sd-journal.h>

#include "log.h"
#include "macro.h"

int log_max_level = LOG_INFO;

/* Under journald (JOURNAL_STREAM set) each line carries its sd-daemon
 * priority prefix, so levels survive; on a terminal the prefix would be noise. */
static int use_prefix = -1;

/* The one place where every log line passes: control characters (a newline, ESC, DEL) of names and of
 * any other text a user controls (a contexts.d file name, a kernel's words) are written as \xNN, so no
 * text splits a line into two or reaches a terminal as an escape sequence. Backslashes stay as they
 * are. dst holds 4 * strlen(src) + 1. */
static void log_escape(char *dst, const char *src) {
        for (const unsigned char *p = (const unsigned char *) src; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        dst += sprintf(dst, "\\x%02x", *p);
                else
                        *dst++ = (char) *p;
        *dst = '\0';
}

static void log_write(int level, const char *text) {
        static const char *const names[] = { "emergency: ", "alert: ", "critical: ", "error: ", "warning: " };
        char buf[4 * 4096 + 1];

        if (use_prefix < 0)
                use_prefix = getenv("JOURNAL_STREAM") != NULL;
        log_escape(buf, text);
        if (use_prefix)
                fprintf(stderr, "<%d>%s\n", level, buf);
        else
                fprintf(stderr, "%s%s\n", level <= LOG_WARNING ? names[level] : "", buf);
}

void log_internal(int level, int error, const char *fmt, ...) {
        char buf[4096];
        va_list ap;

        errno = error; /* so %m names the error we were given */
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        log_write(level, buf);
}

/* journald's native socket. sd_journal_sendv() reports success when it does not exist ("fail silently if
 * the journal is not available"), so an event sent there would be lost without a trace. */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/* Whether stderr is the journal stream systemd gave us (JOURNAL_STREAM names its device and inode, as
 * systemd's own daemons check) and journald's socket is there: then events go to the journal natively,
 * with their fields. A JOURNAL_STREAM inherited from elsewhere, or a journald gone, leaves them on stderr.
 * Checked once: journald's socket does not come and go under a running service. */
static bool stderr_is_journal(void) {
        static int cached = -1;
        const char *e;
        struct stat st;
        unsigned long long dev, ino;

        if (cached >= 0)
                return cached;
        e = getenv("JOURNAL_STREAM");
        cached = e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
                 (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino &&
                 stat(JOURNAL_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode);
        return cached;
}

#define EVENT_FIELDS 10

/* FIELD=value into iov (the buffers live in f[]); false when the value is absent. */
static bool event_field(struct iovec *iov, char *buf, size_t size, const char *name, const char *value) {
        if (!value)
                return false;
        snprintf(buf, size, "%s=%s", name, value);
        *iov = (struct iovec){ .iov_base = buf, .iov_len = strlen(buf) };
        return true;
}

static int event_send(int level, const LogEvent *ev, const char *message) {
        char f[EVENT_FIELDS][320], prio[2] = { (char) ('0' + (level & 7)), 0 }, inc[24], pid[16];
        struct iovec iov[EVENT_FIELDS];
        size_t n = 0;

        snprintf(inc, sizeof inc, "%" PRIu64, ev->incarnation);
        snprintf(pid, sizeof pid, "%d", (int) ev->pid);
        n += event_field(iov + n, f[n], sizeof f[n], "PRIORITY", prio);
        n += event_field(iov + n, f[n], sizeof f[n], "SYSLOG_IDENTIFIER", program_invocation_short_name);
        n += event_field(iov + n, f[n], sizeof f[n], "MESSAGE_ID", ev->message_id);
        n += event_field(iov + n, f[n], sizeof f[n], "KERNELSUP_CONTEXT", ev->context);
        n += event_field(iov + n, f[n], sizeof f[n], "KERNELSUP_KERNEL_ID",
                         ev->kernel_id && *ev->kernel_id ? ev->kernel_id : NULL);
        n += event_field(iov + n, f[n], sizeof f[n], "KERNELSUP_INCARNATION", ev->incarnation ? inc : NULL);
        n += event_field(iov + n, f[n], sizeof f[n], "KERNELSUP_REASON", ev->reason);
        n += event_field(iov + n, f[n], sizeof f[n], "KERNELSUP_PID", ev->pid > 0 ? pid : NULL);
        if (ev->extra && strchr(ev->extra, '=')) {
                snprintf(f[n], sizeof f[n], "%s", ev->extra);
                iov[n] = (struct iovec){ .iov_base = f[n], .iov_len = strlen(f[n]) };
                n++;
        }
        /* The message last, whole (it may be longer than a field buffer). */
        _cleanup_free_ char *msg = NULL;
        if (asprintf(&msg, "MESSAGE=%s", message) < 0)
                return -ENOMEM;
        iov[n++] = (struct iovec){ .iov_base = msg, .iov_len = strlen(msg) };
        return sd_journal_sendv(iov, (int) n);
}

void log_event(int level, const LogEvent *ev, const char *fmt, ...) {
        char buf[4096], text[4 * sizeof buf + 1];
        va_list ap;

        if (level > log_max_level)
                return;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        log_escape(text, buf);
        if (stderr_is_journal() && event_send(level, ev, text) >= 0)
                return;
        log_write(level, buf);
}

/* A child's output relayed into our log: see logrelay.h. */

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "logrelay.h"
#include "macro.h"

/* ipykernel's banner about Ctrl-C concerns a terminal it does not have here; in our log it would read as if
 * it were about the daemon (quickstart says Ctrl-C stops it). Its first and last lines. */
#define BANNER_FIRST "NOTE: When using the `ipython kernel` entry point, Ctrl-C will not work."
#define BANNER_LAST "To read more about this, see https://github.com/ipython/ipython/issues/2049"

struct LogRelay {
        uv_pipe_t pipe;
        char *prefix, *whose;
        char *private_file, *published_file; /* the first is named as the second in the log */
        uint64_t budget;                     /* bytes that may be logged now */
        uint64_t refilled_at;                /* uv_now() of the last refill, in ms */
        uint64_t dropped;                    /* bytes not logged since the last line that was */
        bool in_banner;
        size_t len;
        char buf[4096];
};

static void relay_close_cb(uv_handle_t *h) {
        LogRelay *o = h->data;

        free(o->prefix);
        free(o->whose);
        free(o->private_file);
        free(o->published_file);
        free(o);
}

/* s with every control character (and DEL) as \xNN, so a line cannot move the cursor, end itself or forge the
 * start of another; dst holds 4 * len + 1. */
static void relay_escape(const char *s, size_t len, char *dst) {
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) s[i];
                if (ch < 0x20 || ch == 0x7f)
                        dst += sprintf(dst, "\\x%02x", ch);
                else
                        *dst++ = (char) ch;
        }
        *dst = 0;
}

static void relay_refill(LogRelay *o) {
        uint64_t now = uv_now(o->pipe.loop), add = (now - o->refilled_at) * LOG_RELAY_RATE / 1000;

        if (add == 0)
                return;
        o->budget = o->budget + add > LOG_RELAY_BURST ? LOG_RELAY_BURST : o->budget + add;
        o->refilled_at = now;
}

static void relay_say_dropped(LogRelay *o) {
        if (o->dropped)
                log_info("%s: [%llu bytes of %s output not logged]", o->prefix, (unsigned long long) o->dropped,
                         o->whose);
        o->dropped = 0;
}

/* Whether s is part of ipykernel's Ctrl-C banner (a block of lines between BANNER_FIRST and BANNER_LAST). */
static bool relay_banner(LogRelay *o, const char *s, size_t len) {
        if (!o->in_banner && len == strlen(BANNER_FIRST) && memcmp(s, BANNER_FIRST, len) == 0) {
                o->in_banner = true;
                log_info("%s: (ipykernel's note that Ctrl-C does not reach it is about the kernel's own terminal, "
                         "not kernelsupd; omitted)",
                         o->prefix);
                return true;
        }
        if (o->in_banner && len == strlen(BANNER_LAST) && memcmp(s, BANNER_LAST, len) == 0) {
                o->in_banner = false;
                return true;
        }
        return o->in_banner;
}

static void relay_line(LogRelay *o, const char *s, size_t len) {
        size_t n = o->private_file ? strlen(o->private_file) : 0;
        const char *hit = n ? memmem(s, len, o->private_file, n) : NULL;
        _cleanup_free_ char *e = NULL;

        if (relay_banner(o, s, len))
                return;
        relay_refill(o);
        if (len + 1 > o->budget) {
                o->dropped += len + 1;
                return;
        }
        o->budget -= len + 1;
        relay_say_dropped(o);
        e = malloc(4 * len + 1);
        if (!e)
                return;
        if (!hit) {
                relay_escape(s, len, e);
                log_info("%s: %s", o->prefix, e);
                return;
        }
        relay_escape(s, (size_t) (hit - s), e);
        size_t before = strlen(e);
        relay_escape(hit + n, len - (size_t) (hit - s) - n, e + before);
        log_info("%s: %.*s%s%s", o->prefix, (int) before, e, o->published_file, e + before);
}

static void relay_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        LogRelay *o = h->data;

        *buf = uv_buf_init(o->buf + o->len, (unsigned) (sizeof o->buf - o->len));
}

static void relay_flush(LogRelay *o, bool all) {
        char *start = o->buf, *end = o->buf + o->len, *nl;

        while ((nl = memchr(start, '\n', (size_t) (end - start)))) {
                relay_line(o, start, (size_t) (nl - start));
                start = nl + 1;
        }
        /* A full buffer without a newline, or the end of the stream, is flushed as a line. */
        if (start < end && (all || (start == o->buf && o->len == sizeof o->buf))) {
                relay_line(o, start, (size_t) (end - start));
                start = end;
        }
        o->len = (size_t) (end - start);
        memmove(o->buf, start, o->len);
}

static void relay_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        LogRelay *o = s->data;

        if (n > 0) {
                o->len += (size_t) n;
                relay_flush(o, false);
        } else if (n < 0) {
                relay_flush(o, true);
                relay_say_dropped(o);
                uv_close((uv_handle_t *) s, relay_close_cb);
        }
}

static char *strdup_or_null(const char *s, bool *failed) {
        char *d = s ? strdup(s) : NULL;

        if (s && !d)
                *failed = true;
        return d;
}

int log_relay_open(uv_loop_t *loop, const char *prefix, const char *whose, const char *private_file,
                   const char *published_file) {
        LogRelay *o = calloc(1, sizeof *o);
        bool failed = !o;
        int fds[2], r;

        if (o) {
                o->prefix = strdup_or_null(prefix, &failed);
                o->whose = strdup_or_null(whose, &failed);
                o->private_file = strdup_or_null(private_file, &failed);
                o->published_file = strdup_or_null(published_file ?: private_file, &failed);
        }
        if (failed || pipe2(fds, O_CLOEXEC) < 0) {
                r = failed ? -ENOMEM : -errno;
                if (o)
                        relay_close_cb(&(uv_handle_t){ .data = o });
                return r;
        }
        o->budget = LOG_RELAY_BURST;
        o->refilled_at = uv_now(loop);
        uv_pipe_init(loop, &o->pipe, 0);
        o->pipe.data = o;
        r = uv_pipe_open(&o->pipe, fds[0]);
        if (r >= 0)
                r = uv_read_start((uv_stream_t *) &o->pipe, relay_alloc_cb, relay_read_cb);
        if (r < 0) {
                uv_close((uv_handle_t *) &o->pipe, relay_close_cb);
                close(fds[1]);
                return r;
        }
        return fds[1];
}

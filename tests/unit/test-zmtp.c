/* The pure ZMTP layer (src/jupyter/zmtp.c): what we send, and the reader's keeping and skipping, fed whole and
 * byte by byte, with hand-built streams (no socket). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jupyter.h"
#include "tap.h"
#include "util.h"
#include "zmtp.h"

/* A stream being built: a peer's greeting, then frames. */
typedef struct Stream {
        uint8_t *p;
        size_t len;
} Stream;

static void put(Stream *s, const void *p, size_t len) {
        s->p = realloc(s->p, s->len + len);
        memcpy(s->p + s->len, p, len);
        s->len += len;
}

static void put_greeting(Stream *s) {
        uint8_t g[ZMTP_GREETING_SIZE];

        zmtp_greeting(g);
        g[11] = 1; /* a libzmq 4.3 peer says 3.1 */
        g[32] = 1; /* and is the server */
        put(s, g, sizeof g);
}

static void put_frame(Stream *s, uint8_t flags, const void *p, size_t len) {
        uint8_t h[ZMTP_HEADER_MAX];

        put(s, h, zmtp_header(flags, len, h));
        put(s, p, len);
}

/* A frame of len bytes of c. */
static void put_fill(Stream *s, uint8_t flags, char c, size_t len) {
        char *b = malloc(len ? len : 1);

        memset(b, c, len);
        put_frame(s, flags, b, len);
        free(b);
}

/* What the sink saw. */
typedef struct Seen {
        unsigned messages, oversized, commands;
        size_t n, n_total, bytes;
        unsigned long long trail; /* of every message's counts and bytes, in order */
        char first[32], last[32]; /* the first and last kept frames' first bytes */
        char command[32];
        int stop_after; /* return -ECANCELED from the message of this number (1-based); 0: never */
} Seen;

static int on_message(void *userdata, const void *const *frames, const size_t *lens, size_t n, size_t n_total) {
        Seen *s = userdata;

        s->messages++;
        s->n = n, s->n_total = n_total, s->bytes = 0;
        for (size_t i = 0; i < n; i++)
                s->bytes += lens[i];
        s->trail = s->trail * 1000003 + n * 131 + n_total * 17 + s->bytes;
        s->first[0] = s->last[0] = '\0';
        if (n > 0) {
                snprintf(s->first, sizeof s->first, "%.*s", (int) (lens[0] < 31 ? lens[0] : 31),
                         (const char *) frames[0]);
                snprintf(s->last, sizeof s->last, "%.*s", (int) (lens[n - 1] < 31 ? lens[n - 1] : 31),
                         (const char *) frames[n - 1]);
        }
        return s->stop_after && s->messages == (unsigned) s->stop_after ? -ECANCELED : 0;
}

static int on_oversized(void *userdata) {
        ((Seen *) userdata)->oversized++;
        return 0;
}

static int on_command(void *userdata, const char *name, const uint8_t *data, size_t len) {
        Seen *s = userdata;

        s->commands++;
        snprintf(s->command, sizeof s->command, "%s", name);
        return 0;
}

static const ZmtpSink sink = { .message = on_message, .oversized = on_oversized, .command = on_command };

/* Feeds the stream whole, then again byte by byte into a fresh reader: both must see the same. */
static int feed_both(const Stream *st, ZmtpKeep keep, size_t max, Seen *whole, Seen *bytes) {
        ZmtpReader r;
        int k1, k2 = 0;

        zmtp_reader_init(&r, keep, max, &sink, whole);
        k1 = zmtp_reader_feed(&r, st->p, st->len);
        zmtp_reader_reset(&r);
        zmtp_reader_init(&r, keep, max, &sink, bytes);
        for (size_t i = 0; i < st->len && k2 == 0; i++)
                k2 = zmtp_reader_feed(&r, st->p + i, 1);
        zmtp_reader_reset(&r);
        return k1 != k2 ? -EBADE : k1;
}

static bool seen_same(const Seen *a, const Seen *b) {
        return a->messages == b->messages && a->oversized == b->oversized && a->commands == b->commands &&
               a->trail == b->trail && a->n == b->n && a->n_total == b->n_total && a->bytes == b->bytes &&
               streq(a->first, b->first) && streq(a->last, b->last);
}

static void put_jupyter(Stream *s, unsigned idents, unsigned buffers, size_t buffer_size) {
        static const char *const parts[] = { "0123456789abcdef", "{\"msg_type\":\"x\"}", "{}", "{}", "{\"c\":1}" };

        for (unsigned i = 0; i < idents; i++)
                put_fill(s, ZMTP_FLAG_MORE, 'i', 9); /* as long as the delimiter, to be compared */
        put_frame(s, ZMTP_FLAG_MORE, JUPYTER_DELIM, strlen(JUPYTER_DELIM));
        for (size_t i = 0; i < 5; i++)
                put_frame(s, i + 1 < 5 || buffers ? ZMTP_FLAG_MORE : 0, parts[i], strlen(parts[i]));
        for (unsigned i = 0; i < buffers; i++)
                put_fill(s, i + 1 < buffers ? ZMTP_FLAG_MORE : 0, 'b', buffer_size);
}

static void test_encoding(void) {
        uint8_t g[ZMTP_GREETING_SIZE], h[ZMTP_HEADER_MAX], ready[64];
        int n;

        zmtp_greeting(g);
        ok(g[0] == 0xff && g[9] == 0x7f && g[10] == 3 && g[11] == 0 && memcmp(g + 12, "NULL", 5) == 0 && g[32] == 0,
           "greeting: signature, 3.0, NULL, as a client");
        is_int(zmtp_greeting_check(g), 0, "greeting: ours passes the check");
        g[10] = 2;
        is_int(zmtp_greeting_check(g), -EPROTO, "greeting: ZMTP 2 refused");
        g[10] = 3;
        memcpy(g + 12, "CURVE", 5);
        is_int(zmtp_greeting_check(g), -EPROTO, "greeting: a mechanism other than NULL refused");

        is_int(zmtp_header(ZMTP_FLAG_MORE, 255, h), 2, "header: 255 bytes is short");
        ok(h[0] == ZMTP_FLAG_MORE && h[1] == 255, "header: short flags and size");
        is_int(zmtp_header(0, 256, h), 9, "header: 256 bytes is long");
        ok(h[0] == ZMTP_FLAG_LONG && h[7] == 1 && h[8] == 0, "header: long size in network order");

        n = zmtp_ready("DEALER", NULL, ready, sizeof ready);
        is_int(n, 2 + 6 + 12 + 4 + 6, "READY: header, name, one property");
        ok(n > 0 && ready[0] == ZMTP_FLAG_COMMAND && memcmp(ready + 2, "\5READY\13Socket-Type\0\0\0\6DEALER", 28) == 0,
           "READY: Socket-Type DEALER");
        is_int(zmtp_ready("DEALER", NULL, ready, 10), -ENOBUFS, "READY: too small a buffer");
        /* The shell and stdin connections share one routing identity, so that the kernel's stdin ROUTER reaches
         * the client of the shell request it asks input for. */
        n = zmtp_ready("DEALER", "abc", ready, sizeof ready);
        is_int(n, 2 + 6 + 12 + 4 + 6 + 9 + 4 + 3, "READY with an identity: two properties");
        ok(n > 0 && ready[1] == n - 2 &&
                   memcmp(ready + 8, "\13Socket-Type\0\0\0\6DEALER\10Identity\0\0\0\3abc", 35) == 0,
           "READY: Socket-Type DEALER, then Identity abc");
}

static void test_reader(void) {
        Stream st = {};
        Seen a = {}, b = {};
        uint8_t ready[64];
        int n;

        /* Idents skipped, delimiter and five kept, buffers skipped; a command seen. */
        put_greeting(&st);
        n = zmtp_ready("ROUTER", NULL, ready, sizeof ready);
        put(&st, ready, (size_t) n);
        put_jupyter(&st, 3, 4, 1000);
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 0, &a, &b), 0, "jupyter: read");
        ok(seen_same(&a, &b), "jupyter: byte by byte reads the same as whole");
        is_int(a.commands, 1, "jupyter: the peer's READY is a command");
        is_str(a.command, "READY", "jupyter: its name");
        is_int(a.messages, 1, "jupyter: one message");
        is_int(a.n, 6, "jupyter: the delimiter and five frames kept");
        is_int(a.n_total, 3 + 6 + 4, "jupyter: every frame counted");
        is_str(a.first, JUPYTER_DELIM, "jupyter: the delimiter first");
        is_str(a.last, "{\"c\":1}", "jupyter: the content last, no buffer kept");
        free(st.p), st = (Stream){};

        /* A message with no delimiter: nothing kept, still reported (it is then unreadable). */
        put_greeting(&st);
        put_fill(&st, ZMTP_FLAG_MORE, 't', 5);
        put_fill(&st, 0, 'u', 3000);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 0, &a, &b), 0, "no delimiter: read");
        ok(seen_same(&a, &b) && a.messages == 1 && a.n == 0 && a.n_total == 2,
           "no delimiter: reported with none kept");
        free(st.p), st = (Stream){};

        /* Over the bound: the dicts come to more than max. */
        put_greeting(&st);
        put_jupyter(&st, 0, 0, 0);
        put_frame(&st, ZMTP_FLAG_MORE, JUPYTER_DELIM, strlen(JUPYTER_DELIM));
        put_fill(&st, ZMTP_FLAG_MORE, 's', 64);
        put_fill(&st, ZMTP_FLAG_MORE, 'h', 100);
        put_fill(&st, 0, 'p', 2000);
        put_jupyter(&st, 1, 2, 5000);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 1000, &a, &b), 0, "bound: read");
        ok(seen_same(&a, &b), "bound: byte by byte reads the same as whole");
        is_int(a.oversized, 1, "bound: the message over it reported oversized");
        is_int(a.messages, 2, "bound: the messages before and after it delivered");
        is_int(a.n, 6, "bound: the last one whole (its 5000-byte buffers are not counted)");
        free(st.p), st = (Stream){};

        /* Exactly at the bound: kept; one byte more: over it. */
        put_greeting(&st);
        put_frame(&st, ZMTP_FLAG_MORE, JUPYTER_DELIM, strlen(JUPYTER_DELIM));
        put_fill(&st, 0, 's', 1000);
        put_frame(&st, ZMTP_FLAG_MORE, JUPYTER_DELIM, strlen(JUPYTER_DELIM));
        put_fill(&st, ZMTP_FLAG_MORE, 's', 600);
        put_fill(&st, 0, 'h', 401);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 1000, &a, &b), 0, "at the bound: read");
        ok(seen_same(&a, &b) && a.messages == 1 && a.oversized == 1, "at the bound: 1000 bytes kept, 1001 over it");
        free(st.p), st = (Stream){};

        /* The heartbeat's mode: the first frames, the rest counted. */
        put_greeting(&st);
        put_frame(&st, ZMTP_FLAG_MORE, "", 0);
        put_frame(&st, 0, "12345678", 8);
        put_fill(&st, ZMTP_FLAG_MORE, 'a', 1);
        put_fill(&st, ZMTP_FLAG_MORE, 'b', 1);
        put_fill(&st, ZMTP_FLAG_MORE, 'c', 1);
        put_fill(&st, 0, 'd', 1);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_FIRST, 4096, &a, &b), 0, "first: read");
        ok(seen_same(&a, &b) && a.messages == 2 && a.n == ZMTP_KEEP_FIRST_MAX && a.n_total == 4,
           "first: at most ZMTP_KEEP_FIRST_MAX kept of four, all counted");
        free(st.p), st = (Stream){};

        /* A sink that stops: the reader returns at once. */
        put_greeting(&st);
        put_jupyter(&st, 0, 0, 0);
        put_jupyter(&st, 0, 0, 0);
        a = (Seen){ .stop_after = 1 };
        {
                ZmtpReader r;

                zmtp_reader_init(&r, ZMTP_KEEP_JUPYTER, 0, &sink, &a);
                is_int(zmtp_reader_feed(&r, st.p, st.len), -ECANCELED, "stop: the sink's error returned");
                is_int(a.messages, 1, "stop: nothing read after it");
                zmtp_reader_reset(&r);
        }
        free(st.p), st = (Stream){};

        /* Not ZMTP: a bad greeting, a bad flags byte. */
        put(&st, "GET / HTTP/1.1\r\n", 16);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 0, &a, &b), -EPROTO, "not ZMTP: refused at its first byte");
        free(st.p), st = (Stream){};
        put_greeting(&st);
        put(&st, "\x80\x01x", 3);
        a = b = (Seen){};
        is_int(feed_both(&st, ZMTP_KEEP_JUPYTER, 0, &a, &b), -EPROTO, "a frame with unknown flags refused");
        free(st.p), st = (Stream){};
}

int main(void) {
        test_encoding();
        test_reader();
        return tap_done();
}

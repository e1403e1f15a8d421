/* libFuzzer harness: the ZMTP reader (src/jupyter/zmtp.c), as a kernel's bytes reach it from a socket.
 * Input: one byte of settings, then the stream.
 *   settings & 1: ZMTP_KEEP_FIRST (the heartbeat), else ZMTP_KEEP_JUPYTER;
 *   settings & 2: the stream as given, else our greeting first (so that frames are reached);
 *   settings >> 2: the bound, in 64-byte steps (0: none); the stream is also fed in two pieces, split at
 *   the byte the second input byte names.
 * Properties: fed whole and in two pieces, the reader returns the same and the sink sees the same messages
 * (their kept frame count, total frame count and bytes); no message keeps more frames than its mode does, nor
 * more bytes than the bound; nothing leaks. */
#include "fuzz-util.h"
#include "jupyter.h"
#include "zmtp.h"

typedef struct Seen {
        ZmtpKeep keep;
        size_t max;
        unsigned long messages, oversized, commands;
        unsigned long long sum; /* of kept counts, totals and bytes, order-sensitive */
} Seen;

static int on_message(void *userdata, const void *const *frames, const size_t *lens, size_t n, size_t n_total) {
        Seen *s = userdata;
        size_t bytes = 0;

        FUZZ_CHECK(n <= (s->keep == ZMTP_KEEP_FIRST ? ZMTP_KEEP_FIRST_MAX : ZMTP_JUPYTER_KEPT) && n <= n_total);
        for (size_t i = 0; i < n; i++)
                bytes += lens[i];
        /* The delimiter is kept beyond the bound's count only when it is all there is. */
        FUZZ_CHECK(s->max == 0 || bytes <= s->max + strlen(JUPYTER_DELIM));
        s->messages++;
        s->sum = s->sum * 31 + n * 7 + n_total * 13 + bytes;
        return 0;
}

static int on_oversized(void *userdata) {
        Seen *s = userdata;

        s->oversized++;
        s->sum = s->sum * 31 + 5;
        return 0;
}

static int on_command(void *userdata, const char *name, const uint8_t *data, size_t len) {
        Seen *s = userdata;

        s->commands++;
        s->sum = s->sum * 31 + len;
        return 0;
}

static const ZmtpSink sink = { .message = on_message, .oversized = on_oversized, .command = on_command };

static int feed(const uint8_t *p, size_t len, size_t split, ZmtpKeep keep, size_t max, Seen *s) {
        ZmtpReader r;
        int k;

        zmtp_reader_init(&r, keep, max, &sink, s);
        k = zmtp_reader_feed(&r, p, split);
        if (k == 0)
                k = zmtp_reader_feed(&r, p + split, len - split);
        zmtp_reader_reset(&r);
        return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        uint8_t *stream;
        size_t len, split, max;
        ZmtpKeep keep;
        Seen a = {}, b = {};
        int ka, kb;

        if (size < 2)
                return 0;
        keep = data[0] & 1 ? ZMTP_KEEP_FIRST : ZMTP_KEEP_JUPYTER;
        max = (size_t) (data[0] >> 2) * 64;
        a.max = b.max = max;
        a.keep = b.keep = keep;
        len = (data[0] & 2 ? 0 : ZMTP_GREETING_SIZE) + size - 2;
        stream = malloc(len ? len : 1);
        if (!stream)
                return 0;
        if (!(data[0] & 2))
                zmtp_greeting(stream);
        memcpy(stream + len - (size - 2), data + 2, size - 2);
        split = len ? data[1] % (len + 1) : 0;

        ka = feed(stream, len, len, keep, max, &a);
        kb = feed(stream, len, split, keep, max, &b);
        FUZZ_CHECK(ka == kb);
        FUZZ_CHECK(a.messages == b.messages && a.oversized == b.oversized && a.commands == b.commands &&
                   a.sum == b.sum);
        free(stream);
        return 0;
}

/* libFuzzer harness: the Jupyter wire message parser and its signature
 * check, as a kernel's replies reach jupyter_msg_parse() from libzmq.
 * Input: one flags byte, then frames separated by 0xff bytes (at most 16).
 *   flags & 1: the frame after the delimiter is replaced by the right
 *              HMAC-SHA256 of the next four, so the JSON parser is reached;
 *   flags & 2: no key (unsigned messages, as with an empty Jupyter key).
 * Properties: a wrong signature is -EPERM whatever follows; a correctly
 * signed one is never -EPERM; what parses, serialised again with the key,
 * parses to the same four dicts. jupyter_json_repair() of each frame gives
 * valid UTF-8 with no lone surrogate escape, and repairing that again
 * changes nothing. */
#include "fuzz-util.h"
#include "jupyter.h"
#include "util.h"

#define MAX_FRAMES 16
#define KEY "5f3b4c2a-fuzz-key-0000000000000000"

static size_t frames_split(const uint8_t *p, size_t size, const void *frames[MAX_FRAMES], size_t lens[MAX_FRAMES]) {
        const uint8_t *end = p + size;
        size_t n = 0;

        while (n < MAX_FRAMES) {
                const uint8_t *sep = memchr(p, 0xff, (size_t) (end - p));

                frames[n] = p;
                lens[n++] = (size_t) ((sep ? sep : end) - p);
                if (!sep)
                        break;
                p = sep + 1;
        }
        return n;
}

static size_t delimiter_find(const void *const *frames, const size_t *lens, size_t n) {
        for (size_t d = 0; d < n; d++)
                if (lens[d] == strlen(JUPYTER_DELIM) && memcmp(frames[d], JUPYTER_DELIM, lens[d]) == 0)
                        return d;
        return n;
}

static void check_round_trip(const JupyterMsg *m, const char *key) {
        JupyterFrames f = {};
        JupyterMsg back = {};
        const void *frames[6];

        FUZZ_CHECK(json_is_object(m->header) && json_is_object(m->parent_header) && json_is_object(m->metadata) &&
                   json_is_object(m->content));
        (void) jupyter_msg_type(m);
        (void) jupyter_msg_id(m);
        (void) jupyter_msg_parent_id(m);
        if (jupyter_msg_serialize(m, key, &f) < 0)
                return; /* out of memory */
        for (size_t i = 0; i < 6; i++)
                frames[i] = f.part[i];
        FUZZ_CHECK(jupyter_msg_parse(frames, f.len, 6, key, &back) == 0);
        FUZZ_CHECK(json_equal(back.header, m->header) && json_equal(back.parent_header, m->parent_header) &&
                   json_equal(back.metadata, m->metadata) && json_equal(back.content, m->content));
        jupyter_msg_done(&back);
        jupyter_frames_done(&f);
}

/* The repair of p[0..len): valid UTF-8 (utf8_repair finds nothing) and a fixed point. */
static void check_repair(const void *p, size_t len) {
        char *out = NULL, *again = NULL, *fixed = NULL;
        size_t out_len = 0, again_len = 0, fixed_len = 0;
        int r = jupyter_json_repair(p, len, &out, &out_len);

        if (r < 0)
                return; /* out of memory */
        if (r == 0)
                out_len = len;
        FUZZ_CHECK(utf8_repair(out ?: p, out_len, &fixed, &fixed_len) == 0 && !fixed);
        FUZZ_CHECK(jupyter_json_repair(out ?: p, out_len, &again, &again_len) == 0 && !again);
        free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const void *frames[MAX_FRAMES];
        size_t lens[MAX_FRAMES], n, d;
        const char *key;
        char sig[65];
        bool signed_right = false;
        JupyterMsg m = {};
        uint8_t flags;
        int r;

        if (size < 1)
                return 0;
        flags = data[0];
        key = flags & 2 ? "" : KEY;
        n = frames_split(data + 1, size - 1, frames, lens);
        d = delimiter_find(frames, lens, n);
        for (size_t i = 0; i < n; i++)
                check_repair(frames[i], lens[i]);
        if (*key && d < n && n - d - 1 >= 5) {
                jupyter_sign(key, (const char *const *) &frames[d + 2], &lens[d + 2], sig);
                if (flags & 1) {
                        frames[d + 1] = sig;
                        lens[d + 1] = strlen(sig);
                }
                signed_right = lens[d + 1] == strlen(sig) && memcmp(frames[d + 1], sig, lens[d + 1]) == 0;
        }

        r = jupyter_msg_parse(frames, lens, n, key, &m);
        FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EPERM || r == -ENOMEM);
        if (signed_right)
                FUZZ_CHECK(r != -EPERM);
        else if (*key && d < n && n - d - 1 >= 5)
                /* Unauthenticated input never reaches the JSON parser. */
                FUZZ_CHECK(r == -EPERM);
        if (r == 0) {
                check_round_trip(&m, key);
                jupyter_msg_done(&m);
        }
        return 0;
}

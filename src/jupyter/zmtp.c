/* ZMTP 3.0, NULL mechanism: what we send, and a reader that keeps only what it must. See zmtp.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "jupyter.h"
#include "zmtp.h"

#define DELIM_LEN (sizeof(JUPYTER_DELIM) - 1)
/* What a kept frame starts with; it doubles as its bytes come. */
#define KEPT_FIRST_ALLOC ((size_t) 4096)

void zmtp_greeting(uint8_t ret[ZMTP_GREETING_SIZE]) {
        memset(ret, 0, ZMTP_GREETING_SIZE);
        ret[0] = 0xff;
        ret[9] = 0x7f;
        ret[10] = 3; /* 3.0: a SUB subscribes with a message, not a SUBSCRIBE command */
        ret[11] = 0;
        memcpy(ret + 12, "NULL", 4);
        ret[32] = 0; /* as-server: we are the client */
}

int zmtp_greeting_check(const uint8_t g[ZMTP_GREETING_SIZE]) {
        static const uint8_t null_mechanism[20] = "NULL";

        if (g[0] != 0xff || !(g[9] & 0x01) || g[10] < 3 || memcmp(g + 12, null_mechanism, sizeof null_mechanism) != 0)
                return -EPROTO;
        return 0;
}

size_t zmtp_header(uint8_t flags, uint64_t size, uint8_t ret[ZMTP_HEADER_MAX]) {
        if (size <= UINT8_MAX) {
                ret[0] = flags & ~ZMTP_FLAG_LONG;
                ret[1] = (uint8_t) size;
                return 2;
        }
        ret[0] = flags | ZMTP_FLAG_LONG;
        for (size_t i = 0; i < 8; i++)
                ret[1 + i] = (uint8_t) (size >> (56 - 8 * i));
        return ZMTP_HEADER_MAX;
}

/* Appends the property name = value (ZMTP 3.0: a name of one length byte, a value of four) at ret + *o. */
static void ready_property(const char *name, const char *value, uint8_t *ret, size_t *o) {
        size_t name_len = strlen(name), value_len = strlen(value);

        ret[(*o)++] = (uint8_t) name_len;
        memcpy(ret + *o, name, name_len);
        *o += name_len;
        ret[(*o)++] = 0, ret[(*o)++] = 0, ret[(*o)++] = 0, ret[(*o)++] = (uint8_t) value_len;
        memcpy(ret + *o, value, value_len);
        *o += value_len;
}

int zmtp_ready(const char *socket_type, const char *identity, uint8_t *ret, size_t size) {
        static const char name[] = "\5READY";
        size_t type_len = strlen(socket_type), id_len = identity ? strlen(identity) : 0;
        size_t body = sizeof name - 1 + 1 + strlen("Socket-Type") + 4 + type_len, h, o;
        uint8_t hdr[ZMTP_HEADER_MAX];

        if (identity)
                body += 1 + strlen("Identity") + 4 + id_len;
        h = zmtp_header(ZMTP_FLAG_COMMAND, body, hdr);
        if (type_len > UINT8_MAX || id_len > UINT8_MAX || h + body > size)
                return -ENOBUFS;
        memcpy(ret, hdr, h);
        o = h;
        memcpy(ret + o, name, sizeof name - 1);
        o += sizeof name - 1;
        ready_property("Socket-Type", socket_type, ret, &o);
        if (identity)
                ready_property("Identity", identity, ret, &o);
        return (int) o;
}

static void kept_free(ZmtpReader *r) {
        for (size_t i = 0; i < r->n_kept; i++)
                free(r->frame[i]);
        r->n_kept = r->kept_bytes = 0;
}

static void message_forget(ZmtpReader *r) {
        kept_free(r);
        r->n_frames = 0;
        r->delimited = r->over = false;
}

void zmtp_reader_init(ZmtpReader *r, ZmtpKeep keep, size_t max, const ZmtpSink *sink, void *userdata) {
        *r = (ZmtpReader){ .keep = keep, .max = max, .sink = sink, .userdata = userdata };
}

void zmtp_reader_reset(ZmtpReader *r) {
        message_forget(r);
        zmtp_reader_init(r, r->keep, r->max, r->sink, r->userdata);
}

/* Whether the frame about to be read is kept, by the frames of its message so far. */
static bool frame_wanted(const ZmtpReader *r) {
        if (r->over)
                return false;
        if (r->keep == ZMTP_KEEP_FIRST)
                return r->n_kept < ZMTP_KEEP_FIRST_MAX;
        return r->delimited && r->n_kept < ZMTP_JUPYTER_KEPT;
}

/* A frame's header is complete: decides where its body goes. */
static int frame_begin(ZmtpReader *r) {
        r->in_body = true;
        r->keeping = false;
        r->probe_len = 0;
        r->probing = false;
        if (r->flags & ZMTP_FLAG_COMMAND) {
                r->command_len = 0;
                return 0;
        }
        if (!frame_wanted(r)) {
                /* A frame before the delimiter is looked at only if it has the delimiter's size. */
                r->probing = r->keep == ZMTP_KEEP_JUPYTER && !r->delimited && !r->over && r->left == DELIM_LEN;
                return 0;
        }
        if (r->max > 0 && (r->left > r->max || r->kept_bytes + r->left > r->max)) {
                /* Past the bound: what was kept goes now, nothing more is, and the message ends as oversized. */
                kept_free(r);
                r->over = true;
                return 0;
        }
        /* Grown as the bytes come, so that a size the kernel only claims costs nothing. */
        r->kept_cap = r->left < KEPT_FIRST_ALLOC ? (size_t) r->left : KEPT_FIRST_ALLOC;
        r->frame[r->n_kept] = malloc(r->kept_cap + 1);
        if (!r->frame[r->n_kept])
                return -ENOMEM;
        r->frame_len[r->n_kept] = 0;
        r->frame[r->n_kept][0] = '\0';
        r->keeping = true;
        r->n_kept++;
        r->kept_bytes += r->left;
        return 0;
}

static int command_end(ZmtpReader *r) {
        size_t name_len = r->command_len > 0 ? r->command[0] : 0;
        char name[256];

        if (!r->sink->command || r->command_len == 0)
                return 0;
        if (name_len + 1 > r->command_len)
                name_len = r->command_len - 1;
        memcpy(name, r->command + 1, name_len);
        name[name_len] = '\0';
        return r->sink->command(r->userdata, name, r->command + 1 + name_len, r->command_len - 1 - name_len);
}

static int message_end(ZmtpReader *r) {
        const void *frames[ZMTP_JUPYTER_KEPT];
        size_t n_total = r->n_frames, n = r->n_kept;
        int k;

        for (size_t i = 0; i < n; i++)
                frames[i] = r->frame[i];
        if (r->over)
                k = r->sink->oversized ? r->sink->oversized(r->userdata) : 0;
        else
                k = r->sink->message(r->userdata, frames, r->frame_len, n, n_total);
        if (k < 0)
                return k;
        message_forget(r);
        return 0;
}

/* A frame's body is complete. */
static int frame_end(ZmtpReader *r) {
        r->in_body = false;
        r->header_got = 0;
        if (r->flags & ZMTP_FLAG_COMMAND)
                return command_end(r);
        r->n_frames++;
        if (r->probing && memcmp(r->probe, JUPYTER_DELIM, DELIM_LEN) == 0) {
                /* The delimiter: kept as the first frame, as jupyter_msg_parse() looks for it. */
                r->frame[0] = strdup(JUPYTER_DELIM);
                if (!r->frame[0])
                        return -ENOMEM;
                r->frame_len[0] = DELIM_LEN;
                r->n_kept = 1;
                r->delimited = true;
        }
        if (r->flags & ZMTP_FLAG_MORE)
                return 0;
        return message_end(r);
}

/* Appends p[0..n) to the frame being kept. */
static int kept_append(ZmtpReader *r, const uint8_t *p, size_t n) {
        size_t i = r->n_kept - 1, len = r->frame_len[i];

        if (len + n > r->kept_cap) {
                size_t cap = len + n > 2 * r->kept_cap ? len + n : 2 * r->kept_cap;
                char *f;

                /* Never past the frame's own size (r->left still counts these n bytes). */
                if (cap > len + r->left)
                        cap = (size_t) (len + r->left);
                f = realloc(r->frame[i], cap + 1);

                if (!f)
                        return -ENOMEM;
                r->frame[i] = f;
                r->kept_cap = cap;
        }
        memcpy(r->frame[i] + len, p, n);
        r->frame_len[i] = len + n;
        r->frame[i][len + n] = '\0';
        return 0;
}

/* Takes up to len bytes of the current frame's body; returns how many, or -ENOMEM. */
static ssize_t body_take(ZmtpReader *r, const uint8_t *p, size_t len) {
        size_t n = len < r->left ? len : (size_t) r->left;

        if (r->flags & ZMTP_FLAG_COMMAND) {
                size_t room = ZMTP_COMMAND_KEPT - r->command_len, k = n < room ? n : room;

                memcpy(r->command + r->command_len, p, k);
                r->command_len += k;
        } else if (r->keeping) {
                if (kept_append(r, p, n) < 0)
                        return -ENOMEM;
        } else if (r->probing) {
                memcpy(r->probe + r->probe_len, p, n);
                r->probe_len += n;
        }
        r->left -= n;
        return n;
}

/* Takes bytes of a frame header; returns how many, or -EPROTO. */
static ssize_t header_take(ZmtpReader *r, const uint8_t *p, size_t len) {
        size_t need, k;

        if (r->header_got == 0) {
                r->header[0] = p[0];
                r->header_got = 1;
                if (p[0] & ~(ZMTP_FLAG_MORE | ZMTP_FLAG_LONG | ZMTP_FLAG_COMMAND))
                        return -EPROTO;
                return 1;
        }
        need = (r->header[0] & ZMTP_FLAG_LONG ? ZMTP_HEADER_MAX : 2) - r->header_got;
        k = len < need ? len : need;
        memcpy(r->header + r->header_got, p, k);
        r->header_got += k;
        if (k < need)
                return (ssize_t) k;
        r->flags = r->header[0];
        r->left = 0;
        if (r->flags & ZMTP_FLAG_LONG)
                for (size_t i = 1; i < ZMTP_HEADER_MAX; i++)
                        r->left = r->left << 8 | r->header[i];
        else
                r->left = r->header[1];
        if ((r->flags & ZMTP_FLAG_LONG) && r->left > INT64_MAX)
                return -EPROTO;
        return (ssize_t) k;
}

int zmtp_reader_feed(ZmtpReader *r, const void *data, size_t len) {
        const uint8_t *p = data;
        int k;

        while (len > 0 && r->greeting_got < ZMTP_GREETING_SIZE) {
                size_t n = ZMTP_GREETING_SIZE - r->greeting_got;

                n = n < len ? n : len;
                memcpy(r->greeting + r->greeting_got, p, n);
                r->greeting_got += n, p += n, len -= n;
                /* The signature's first byte and the version come early: refuse a peer that is no ZMTP 3 at once. */
                if (r->greeting[0] != 0xff)
                        return -EPROTO;
                if (r->greeting_got == ZMTP_GREETING_SIZE && zmtp_greeting_check(r->greeting) < 0)
                        return -EPROTO;
        }
        while (len > 0 || (r->in_body && r->left == 0)) {
                ssize_t b;

                if (!r->in_body) {
                        ssize_t h = header_take(r, p, len);

                        if (h < 0)
                                return (int) h;
                        p += h, len -= (size_t) h;
                        if (r->header_got < 2 || r->header_got < (r->header[0] & ZMTP_FLAG_LONG ? ZMTP_HEADER_MAX : 2))
                                continue;
                        k = frame_begin(r);
                        if (k < 0)
                                return k;
                }
                b = body_take(r, p, len);
                if (b < 0)
                        return (int) b;
                p += b, len -= (size_t) b;
                if (r->left == 0) {
                        k = frame_end(r);
                        if (k < 0)
                                return k;
                }
        }
        return 0;
}

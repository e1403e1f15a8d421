/* A cell's outputs as text for a model (render.h). */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "render.h"
#include "util.h"

/* A line longer than this is let out unfinished: a '\r' then overwrites only what came after. Bounds the memory
 * a print without newlines costs. */
#define LINE_MAX_BYTES (64 * 1024)
/* An OSC, DCS, APC or PM string that has not ended after this many bytes is taken as text again: a stray
 * ESC ] must not swallow the rest of a cell. */
#define ESC_STRING_MAX 4096

#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef enum EscState {
        ESC_NONE,
        ESC_START,      /* after ESC */
        ESC_CSI,        /* ESC [ parameters, intermediates, then a final byte */
        ESC_INTER,      /* ESC, intermediates (ESC ( B), then a final byte */
        ESC_STRING,     /* ESC ] (OSC), ESC P (DCS), ESC X, ESC ^, ESC _: up to BEL or ESC \ */
        ESC_STRING_ESC, /* an ESC inside such a string */
} EscState;

typedef struct Buf {
        char *s;
        size_t len, alloc;
} Buf;

/* What a terminal holds of the line being written: its bytes and the cursor, a byte offset at a character's
 * start. */
typedef struct Line {
        Buf b;
        size_t cursor;
        EscState esc;
        size_t esc_len;
        CellRenderTarget target;
        Buf *capture; /* NULL: finished lines go to the budget; else appended here */
        bool open;    /* a part of the line was let out (LINE_MAX_BYTES) and its end has not come */
} Line;

struct CellRender {
        CellRenderEmit emit;
        void *userdata;
        CellRenderSave save;
        void *save_userdata;
        bool traceback;
        int error;

        /* The budget: max 0 is none. The head is emitted as it comes; then the ring holds the last ring_cap
         * bytes, each with its target in tags. */
        size_t max, head_cap, head_used, total, dropped, dropped_lines;
        bool head_closed, head_at_line_start;
        char *ring;
        unsigned char *tags;
        size_t ring_cap, ring_start, ring_len;

        Line streams[_CELL_RENDER_TARGET_MAX];
};

static bool is_continuation(unsigned char b) {
        return (b & 0xC0) == 0x80;
}

/* The length of the character whose first byte is at s (n > 0 bytes there); 1 for a stray byte. */
static size_t char_length(const char *s, size_t n) {
        unsigned char b = (unsigned char) s[0];
        size_t k = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;

        return k <= n ? k : 1;
}

static int buf_put(Buf *b, const char *s, size_t n) {
        if (b->alloc - b->len <= n) {
                size_t alloc = (b->len + n + 1) * 2;
                char *p = realloc(b->s, alloc);

                if (!p)
                        return -ENOMEM;
                b->s = p;
                b->alloc = alloc;
        }
        memcpy(b->s + b->len, s, n);
        b->len += n;
        b->s[b->len] = '\0';
        return 0;
}

static size_t count_newlines(const char *s, size_t n) {
        size_t k = 0;

        for (const char *p = s, *end = s + n; (p = memchr(p, '\n', (size_t) (end - p))); p++)
                k++;
        return k;
}

static void emit_raw(CellRender *r, CellRenderTarget t, const char *s, size_t n) {
        if (n > 0 && r->emit)
                r->emit(t, s, n, r->userdata);
}

/* Drops the k oldest bytes of the ring. */
static void ring_evict(CellRender *r, size_t k) {
        size_t first = MIN(k, r->ring_cap - r->ring_start);

        r->dropped_lines += count_newlines(r->ring + r->ring_start, first) + count_newlines(r->ring, k - first);
        r->dropped += k;
        r->ring_start = r->ring_cap ? (r->ring_start + k) % r->ring_cap : 0;
        r->ring_len -= k;
}

static void ring_push(CellRender *r, CellRenderTarget t, const char *s, size_t n) {
        size_t end, first;

        if (n >= r->ring_cap) {
                /* All that was held goes, and so does the start of s. */
                ring_evict(r, r->ring_len);
                r->dropped += n - r->ring_cap;
                r->dropped_lines += count_newlines(s, n - r->ring_cap);
                s += n - r->ring_cap;
                n = r->ring_cap;
                r->ring_start = 0;
        } else if (r->ring_len + n > r->ring_cap)
                ring_evict(r, r->ring_len + n - r->ring_cap);
        if (n == 0)
                return;
        end = (r->ring_start + r->ring_len) % r->ring_cap;
        first = MIN(n, r->ring_cap - end);
        memcpy(r->ring + end, s, first);
        memset(r->tags + end, (int) t, first);
        memcpy(r->ring, s + first, n - first);
        memset(r->tags, (int) t, n - first);
        r->ring_len += n;
}

/* Everything rendered passes here, in whole characters. */
static int budget_write(CellRender *r, CellRenderTarget t, const char *s, size_t n) {
        size_t cut;

        r->total += n;
        if (r->max == 0 || n == 0) {
                emit_raw(r, t, s, n);
                return 0;
        }
        if (!r->head_closed) {
                cut = MIN(n, r->head_cap - r->head_used);
                /* The head ends where a character ends. */
                while (cut < n && cut > 0 && is_continuation((unsigned char) s[cut]))
                        cut--;
                emit_raw(r, t, s, cut);
                if (cut > 0)
                        r->head_at_line_start = s[cut - 1] == '\n';
                r->head_used += cut;
                s += cut;
                n -= cut;
                if (n == 0)
                        return 0;
                r->head_closed = true;
                r->ring_cap = r->max - r->head_used;
                r->ring = malloc(r->ring_cap + 1);
                r->tags = malloc(r->ring_cap + 1);
                if (!r->ring || !r->tags)
                        return -ENOMEM;
        }
        ring_push(r, t, s, n);
        return 0;
}

static int line_flush(CellRender *r, Line *l, bool newline) {
        int k = 0;

        if (newline && buf_put(&l->b, "\n", 1) < 0)
                return -ENOMEM;
        if (l->b.len > 0)
                k = l->capture ? buf_put(l->capture, l->b.s, l->b.len) : budget_write(r, l->target, l->b.s, l->b.len);
        l->open = !newline;
        l->b.len = l->cursor = 0;
        return k;
}

/* Writes the character (or, with the cursor at the end, the characters) s[0..n) at the cursor, over what is
 * there. */
static int line_put(CellRender *r, Line *l, const char *s, size_t n) {
        if (l->cursor == l->b.len) {
                if (buf_put(&l->b, s, n) < 0)
                        return -ENOMEM;
        } else {
                size_t old = char_length(l->b.s + l->cursor, l->b.len - l->cursor);

                if (n > old && buf_put(&l->b, s, n - old) < 0)
                        return -ENOMEM;
                else if (n < old)
                        l->b.len -= old - n;
                /* buf_put grew len already for the longer character; move the rest to its place. */
                memmove(l->b.s + l->cursor + n, l->b.s + l->cursor + old, l->b.len - (l->cursor + n));
                memcpy(l->b.s + l->cursor, s, n);
        }
        l->cursor += n;
        if (l->b.len >= LINE_MAX_BYTES && l->cursor == l->b.len)
                return line_flush(r, l, false);
        return 0;
}

/* Steps the escape state machine over b: true when b belongs to the sequence, false when b ended it without
 * being part of it (it is then text again). */
static bool esc_step(Line *l, unsigned char b) {
        switch (l->esc) {
        case ESC_START:
                l->esc = b == '['                                                   ? ESC_CSI
                         : b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_' ? ESC_STRING
                         : b >= 0x20 && b <= 0x2f                                   ? ESC_INTER
                                                                                    : ESC_NONE;
                l->esc_len = 0;
                /* ESC and a final byte is a whole sequence; before anything else ESC was alone. */
                return b >= 0x20 && b <= 0x7e;
        case ESC_CSI:
                if (b >= 0x20 && b <= 0x3f)
                        return true;
                l->esc = ESC_NONE;
                return b >= 0x40 && b <= 0x7e;
        case ESC_INTER:
                if (b >= 0x20 && b <= 0x2f)
                        return true;
                l->esc = ESC_NONE;
                return b >= 0x30 && b <= 0x7e;
        case ESC_STRING:
                if (b == 0x07)
                        l->esc = ESC_NONE;
                else if (b == 0x1b)
                        l->esc = ESC_STRING_ESC;
                else if (++l->esc_len > ESC_STRING_MAX && !is_continuation(b)) {
                        l->esc = ESC_NONE;
                        return false;
                }
                return true;
        case ESC_STRING_ESC:
                if (b == '\\') {
                        l->esc = ESC_NONE;
                        return true;
                }
                l->esc = ESC_START;
                return esc_step(l, b);
        case ESC_NONE:
                break;
        }
        return false;
}

/* A C1 control in UTF-8 (C2 80..9F): CSI and the string introducers start a sequence, the others go. */
static void c1_control(Line *l, unsigned char b) {
        l->esc_len = 0;
        l->esc = b == 0x9b                                                       ? ESC_CSI
                 : b == 0x9d || b == 0x90 || b == 0x98 || b == 0x9e || b == 0x9f ? ESC_STRING
                                                                                 : ESC_NONE;
}

/* The plain text at s[0..n) from the cursor at the end of the line: up to a control byte, within the line's
 * bound, in whole characters (at least one). */
static size_t text_span(const Line *l, const char *s, size_t n) {
        size_t first = char_length(s, n), room = LINE_MAX_BYTES - MIN(l->b.len, LINE_MAX_BYTES - 1);
        size_t end = MIN(n, room), k = first;

        /* The scan stops at the line's bound: a long message costs its length, not its length times its pieces. */
        while (k < end && ((unsigned char) s[k] >= 0x20 || s[k] == 0) && s[k] != 0x7f && (unsigned char) s[k] != 0xC2)
                k++;
        /* Stopped by the bound inside a character: that character goes to the next piece. */
        while (k > first && k < n && is_continuation((unsigned char) s[k]))
                k--;
        return k;
}

/* Feeds s[0..n) to the line as a terminal takes it. */
static int line_feed(CellRender *r, Line *l, const char *s, size_t n) {
        size_t i = 0, k;
        int e = 0;

        while (e >= 0 && i < n) {
                unsigned char b = (unsigned char) s[i];

                if (l->esc != ESC_NONE && esc_step(l, b)) {
                        i++;
                        continue;
                }
                /* Here b is text, or it ended a sequence without being part of it (a control, a byte of text). */
                k = 1;
                if (b == 0x1b)
                        l->esc = ESC_START;
                else if (b == '\n')
                        e = line_flush(r, l, true);
                else if (b == '\r')
                        l->cursor = 0;
                else if (b == '\b') {
                        while (l->cursor > 0 && is_continuation((unsigned char) l->b.s[--l->cursor]))
                                ;
                } else if (b == '\t')
                        e = line_put(r, l, s + i, 1);
                else if ((b < 0x20 && b != 0) || b == 0x7f)
                        ; /* other controls: nothing a reader sees; a NUL is kept, as a notebook's text holds it */
                else if (b == 0xC2 && i + 1 < n && (unsigned char) s[i + 1] <= 0x9f &&
                         (unsigned char) s[i + 1] >= 0x80) {
                        c1_control(l, (unsigned char) s[i + 1]);
                        k = 2;
                } else {
                        k = l->cursor == l->b.len ? text_span(l, s + i, n - i) : char_length(s + i, n - i);
                        e = line_put(r, l, s + i, k);
                }
                i += k;
        }
        return e;
}

/* Ends the line as a new output or the cell's end does: what is left of it on a line of its own. */
static int line_end(CellRender *r, Line *l) {
        bool partial = l->b.len > 0 || l->open;

        l->esc = ESC_NONE;
        return partial ? line_flush(r, l, true) : 0;
}

/* s[0..n) as a terminal leaves it, into out, ending with a newline when it has text. */
static int plain_text(const char *s, size_t n, Buf *out) {
        Line l = { .capture = out };
        int k;

        k = line_feed(NULL, &l, s, n);
        if (k >= 0)
                k = line_end(NULL, &l);
        free(l.b.s);
        return k;
}

/* A block of text (a result's form, an error's frame) for target, as a terminal would leave it. */
static int write_block(CellRender *r, CellRenderTarget t, const char *s, size_t n) {
        _cleanup_free_ char *text = NULL;
        Buf out = {};
        int k;

        k = plain_text(s, n, &out);
        text = out.s;
        return k < 0 ? k : budget_write(r, t, out.s, out.len);
}

bool cell_render_is_placeholder(const char *s, size_t n) {
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
                n--;
        if (n < 3 || s[0] != '<' || s[n - 1] != '>' || memchr(s, '\n', n))
                return false;
        return memmem(s, n, " object", 7) || memmem(s, n, " at 0x", 6) || (n > 8 && memcmp(s, "<Figure ", 8) == 0);
}

char *cell_render_format_size(char *buf, size_t size, size_t n) {
        double k = (double) n / 1024.0;

        if (n < 1024)
                snprintf(buf, size, "%zu B", n);
        else if (k < 10)
                snprintf(buf, size, "%.1f KB", k);
        else if (k < 1024)
                snprintf(buf, size, "%.0f KB", k);
        else
                snprintf(buf, size, "%.1f MB", k / 1024.0);
        return buf;
}

static bool mime_is_text(const char *mime) {
        return strncmp(mime, "text/", 5) == 0 || strstr(mime, "json") || strstr(mime, "xml") ||
               strstr(mime, "javascript");
}

/* The size of a form: a text's bytes, a binary form's decoded bytes (it comes in base64), a JSON value's text. */
static size_t mime_size(const char *mime, const json_t *v) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v), c = 0;

        if (!s) {
                _cleanup_free_ char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                return d ? strlen(d) : 0;
        }
        if (mime_is_text(mime))
                return n;
        for (size_t i = 0; i < n; i++)
                c += (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                     s[i] == '+' || s[i] == '/';
        return c / 4 * 3 + (c % 4 ? c % 4 - 1 : 0);
}

/* The form whose text is shown: markdown, then plain text unless it only names what other forms hold, then html. */
static const char *rich_pick(const json_t *data) {
        const json_t *plain = json_object_get(data, "text/plain");

        if (json_is_string(json_object_get(data, "text/markdown")))
                return "text/markdown";
        if (json_is_string(plain) &&
            !(json_object_size(data) > 1 &&
              cell_render_is_placeholder(json_string_value(plain), json_string_length(plain))))
                return "text/plain";
        if (json_is_string(json_object_get(data, "text/html")))
                return "text/html";
        return NULL;
}

int cell_render_base64_decode(const char *s, size_t n, char **ret, size_t *ret_len) {
        _cleanup_free_ char *out = malloc(n / 4 * 3 + 4);
        uint32_t acc = 0;
        size_t len = 0, bits = 0;
        bool padded = false;

        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                int v = c >= 'A' && c <= 'Z'   ? c - 'A'
                        : c >= 'a' && c <= 'z' ? c - 'a' + 26
                        : c >= '0' && c <= '9' ? c - '0' + 52
                        : c == '+'             ? 62
                        : c == '/'             ? 63
                                               : -1;

                if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
                        continue;
                if (c == '=') {
                        padded = true;
                        continue;
                }
                if (v < 0 || padded)
                        return -EINVAL;
                acc = (acc << 6) | (uint32_t) v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[len++] = (char) (acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        /* A lone sixth of a byte is no base64. */
        if (bits >= 6)
                return -EINVAL;
        out[len] = '\0';
        *ret = TAKE_PTR(out);
        *ret_len = len;
        return 0;
}

void cell_render_set_save(CellRender *r, CellRenderSave save, void *userdata) {
        r->save = save;
        r->save_userdata = userdata;
}

/* Where a binary form went, ": PATH", or why it did not, ": not saved: WHY"; "" when nothing saves. New. */
static char *rich_saved(CellRender *r, const char *mime, const json_t *v) {
        _cleanup_free_ char *data = NULL, *path = NULL;
        size_t n;
        char *s;
        int k;

        if (!r->save || !json_is_string(v) || mime_is_text(mime))
                return strdup("");
        k = cell_render_base64_decode(json_string_value(v), json_string_length(v), &data, &n);
        if (k == -ENOMEM)
                return NULL;
        if (k < 0)
                return strdup(": not saved: not base64");
        k = r->save(mime, data, n, &path, r->save_userdata);
        if (asprintf(&s, k < 0 ? ": not saved: %s" : ": %s", k < 0 ? strerror(-k) : path) < 0)
                return NULL;
        return s;
}

/* "[image/png 18 KB]" for each form but the one shown and text/plain (another form's name, or its text). */
static int rich_other_forms(CellRender *r, const json_t *data, const char *pick) {
        const char *mime;
        json_t *v;

        json_object_foreach((json_t *) data, mime, v) {
                _cleanup_free_ char *line = NULL, *saved = NULL;
                char size[32];
                int k;

                if ((pick && streq(mime, pick)) || streq(mime, "text/plain"))
                        continue;
                saved = rich_saved(r, mime, v);
                if (!saved || asprintf(&line, "[%s %s%s]", mime,
                                       cell_render_format_size(size, sizeof size, mime_size(mime, v)), saved) < 0)
                        return -ENOMEM;
                k = write_block(r, CELL_RENDER_OUT, line, strlen(line));
                if (k < 0)
                        return k;
        }
        return 0;
}

static int render_rich(CellRender *r, const json_t *data) {
        const char *pick = rich_pick(data);
        const json_t *v = pick ? json_object_get(data, pick) : NULL;
        int k = 0;

        if (!json_is_object(data))
                return 0;
        if (pick && streq(pick, "text/html")) {
                _cleanup_free_ char *text = cell_render_html_text(json_string_value(v), json_string_length(v));

                if (!text)
                        return -ENOMEM;
                k = write_block(r, CELL_RENDER_OUT, text, strlen(text));
        } else if (pick)
                k = write_block(r, CELL_RENDER_OUT, json_string_value(v), json_string_length(v));
        return k < 0 ? k : rich_other_forms(r, data, pick);
}

/* Whether a traceback frame (its plain text) is one of the cell's code: ipykernel writes "Cell In[3], line 4"
 * (IPython 8.5 and older: "Cell In [3], ..."); library frames start "File /usr/lib/...". */
static bool frame_is_cell(const char *s) {
        s += strspn(s, " ");
        return strncmp(s, "Cell In[", 8) == 0 || strncmp(s, "Cell In [", 9) == 0;
}

/* "Name: value" (a value may hold a NUL), as a block. */
static int render_error_line(CellRender *r, const json_t *out) {
        const json_t *ename = json_object_get(out, "ename"), *evalue = json_object_get(out, "evalue");
        _cleanup_free_ char *text = NULL;
        Buf b = {};
        int k;

        k = json_is_string(ename) ? buf_put(&b, json_string_value(ename), json_string_length(ename))
                                  : buf_put(&b, "Error", 5);
        if (k >= 0 && json_string_length(evalue) > 0) {
                k = buf_put(&b, ": ", 2);
                if (k >= 0)
                        k = buf_put(&b, json_string_value(evalue), json_string_length(evalue));
        }
        text = b.s;
        return k < 0 ? k : write_block(r, CELL_RENDER_ERR, b.s, b.len);
}

static int render_error(CellRender *r, const json_t *out) {
        const json_t *tb = json_object_get(out, "traceback"), *frame;
        size_t i;
        int k;

        json_array_foreach(tb, i, frame) {
                _cleanup_free_ char *text = NULL;
                Buf b = {};

                if (!json_is_string(frame))
                        continue;
                k = plain_text(json_string_value(frame), json_string_length(frame), &b);
                text = b.s;
                if (k < 0)
                        return k;
                if (b.len > 0 && (r->traceback || frame_is_cell(b.s)) &&
                    (k = budget_write(r, CELL_RENDER_ERR, b.s, b.len)) < 0)
                        return k;
        }
        /* The whole traceback ends with the error's line already. */
        if (r->traceback && json_array_size(tb) > 0)
                return 0;
        return render_error_line(r, out);
}

int cell_render_output(CellRender *r, const json_t *out) {
        const char *type = json_string_value(json_object_get(out, "output_type"));
        int k = 0;

        if (r->error < 0)
                return r->error;
        if (!type)
                return 0;
        if (streq(type, "stream")) {
                const json_t *text = json_object_get(out, "text");
                bool err = streq_ptr(json_string_value(json_object_get(out, "name")), "stderr");

                if (json_is_string(text))
                        k = line_feed(r, &r->streams[err ? CELL_RENDER_ERR : CELL_RENDER_OUT], json_string_value(text),
                                      json_string_length(text));
        } else if (streq(type, "execute_result") || streq(type, "display_data") ||
                   streq(type, "update_display_data") || streq(type, "error")) {
                /* A new output: a stream after it is a new one, as in a notebook. */
                for (size_t t = 0; k >= 0 && t < _CELL_RENDER_TARGET_MAX; t++)
                        k = line_end(r, &r->streams[t]);
                if (k >= 0)
                        k = streq(type, "error") ? render_error(r, out) : render_rich(r, json_object_get(out, "data"));
        }
        if (k < 0)
                r->error = k;
        return k;
}

CellRender *cell_render_new(size_t max_output, bool traceback, CellRenderEmit emit, void *userdata) {
        CellRender *r = calloc(1, sizeof *r);

        if (!r)
                return NULL;
        *r = (CellRender){
                .emit = emit,
                .userdata = userdata,
                .traceback = traceback,
                .max = max_output,
                .head_cap = max_output / 2,
                .head_at_line_start = true,
        };
        for (size_t t = 0; t < _CELL_RENDER_TARGET_MAX; t++)
                r->streams[t].target = (CellRenderTarget) t;
        return r;
}

void cell_render_free(CellRender *r) {
        if (!r)
                return;
        for (size_t t = 0; t < _CELL_RENDER_TARGET_MAX; t++)
                free(r->streams[t].b.s);
        free(r->ring);
        free(r->tags);
        free(r);
}

/* The ring in order from its oldest byte, into new buffers. */
static int ring_linear(CellRender *r, char **ret_s, unsigned char **ret_tags) {
        size_t first = MIN(r->ring_len, r->ring_cap - r->ring_start);
        char *s = malloc(r->ring_len + 1);
        unsigned char *tags = malloc(r->ring_len + 1);

        if (!s || !tags) {
                free(s);
                free(tags);
                return -ENOMEM;
        }
        memcpy(s, r->ring + r->ring_start, first);
        memcpy(s + first, r->ring, r->ring_len - first);
        memcpy(tags, r->tags + r->ring_start, first);
        memcpy(tags + first, r->tags, r->ring_len - first);
        *ret_s = s;
        *ret_tags = tags;
        return 0;
}

/* The marker between head and tail, on a line of its own. */
static int emit_marker(CellRender *r, CellRenderTarget t) {
        _cleanup_free_ char *m = NULL;

        if (asprintf(&m, "%s[... %zu bytes, %zu line%s dropped ...]\n", r->head_at_line_start ? "" : "\n", r->dropped,
                     r->dropped_lines, r->dropped_lines == 1 ? "" : "s") < 0)
                return -ENOMEM;
        emit_raw(r, t, m, strlen(m));
        return 0;
}

/* The tail: the ring from its first whole character, in runs of one target. */
static int emit_tail(CellRender *r, size_t *ret_kept) {
        _cleanup_free_ char *s = NULL;
        _cleanup_free_ unsigned char *tags = NULL;
        size_t i = 0;
        int k;

        k = ring_linear(r, &s, &tags);
        if (k < 0)
                return k;
        while (r->dropped > 0 && i < r->ring_len && is_continuation((unsigned char) s[i]))
                i++;
        r->dropped += i;
        if (r->dropped > 0 && (k = emit_marker(r, i < r->ring_len ? tags[i] : CELL_RENDER_OUT)) < 0)
                return k;
        *ret_kept = r->head_used + r->ring_len - i;
        while (i < r->ring_len) {
                size_t j = i + 1;

                while (j < r->ring_len && tags[j] == tags[i])
                        j++;
                emit_raw(r, tags[i], s + i, j - i);
                i = j;
        }
        return 0;
}

int cell_render_finish(CellRender *r, size_t *ret_kept, size_t *ret_dropped) {
        size_t kept;
        int k = r->error;

        for (size_t t = 0; k >= 0 && t < _CELL_RENDER_TARGET_MAX; t++)
                k = line_end(r, &r->streams[t]);
        /* Counted after the unfinished lines went out: they are part of the text. */
        kept = r->total;
        if (k >= 0 && r->head_closed)
                k = emit_tail(r, &kept);
        if (k < 0)
                return r->error = k;
        if (ret_kept)
                *ret_kept = kept;
        if (ret_dropped)
                *ret_dropped = r->dropped;
        return r->dropped > 0;
}

/* The tags whose end is a line's end, and those that part table cells. */
static bool html_tag_is_block(const char *name) {
        static const char *const blocks[] = { "p",       "div",     "br",     "tr",     "li",     "h1", "h2",
                                              "h3",      "h4",      "h5",     "h6",     "ul",     "ol", "pre",
                                              "hr",      "table",   "thead",  "tbody",  "dt",     "dd", "blockquote",
                                              "section", "article", "header", "footer", "caption" };

        for (size_t i = 0; i < ELEMENTSOF(blocks); i++)
                if (streq(name, blocks[i]))
                        return true;
        return false;
}

typedef struct HtmlText {
        Buf out;
        bool space; /* blanks seen since the last text */
} HtmlText;

static int html_newline(HtmlText *h) {
        while (h->out.len > 0 && (h->out.s[h->out.len - 1] == ' ' || h->out.s[h->out.len - 1] == '\t'))
                h->out.len--;
        h->space = false;
        if (h->out.len == 0 || h->out.s[h->out.len - 1] == '\n')
                return 0;
        return buf_put(&h->out, "\n", 1);
}

static int html_char(HtmlText *h, const char *s, size_t n) {
        bool line_start = h->out.len == 0 || h->out.s[h->out.len - 1] == '\n' || h->out.s[h->out.len - 1] == '\t';

        if (h->space && !line_start && buf_put(&h->out, " ", 1) < 0)
                return -ENOMEM;
        h->space = false;
        return buf_put(&h->out, s, n);
}

/* An entity at s[0..n) (s[0] is '&'): its text into h, and its length; 0 when it is none (the '&' is text). */
static size_t html_entity(HtmlText *h, const char *s, size_t n, int *ret) {
        static const struct {
                const char *name, *text;
        } named[] = { { "amp", "&" },  { "lt", "<" },   { "gt", ">" }, { "quot", "\"" },
                      { "apos", "'" }, { "nbsp", " " }, { "#39", "'" } };
        const char *semi = memchr(s, ';', MIN(n, 12));
        size_t len = semi ? (size_t) (semi - s) - 1 : 0;
        char name[12], utf8[5] = {};
        unsigned long cp;
        char *end;

        if (!semi || len == 0)
                return 0;
        memcpy(name, s + 1, len);
        name[len] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(named); i++)
                if (streq(name, named[i].name)) {
                        *ret = html_char(h, named[i].text, strlen(named[i].text));
                        return len + 2;
                }
        if (name[0] != '#')
                return 0;
        cp = strtoul(name + 1 + (name[1] == 'x' || name[1] == 'X'), &end, name[1] == 'x' || name[1] == 'X' ? 16 : 10);
        if (*end || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp < 0x20)
                *ret = html_char(h, UTF8_REPLACEMENT, 3);
        else {
                size_t k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;

                utf8[0] = (char) (k == 1 ? cp : (0xF00 >> k) | (cp >> (6 * (k - 1))));
                for (size_t i = 1; i < k; i++)
                        utf8[i] = (char) (0x80 | ((cp >> (6 * (k - 1 - i))) & 0x3F));
                *ret = html_char(h, utf8, k);
        }
        return len + 2;
}

/* A tag at s[0..n) (s[0] is '<'): what it does to the text; returns its length. *ret_skip gets the element
 * whose content is dropped (script, style) when it opens one. */
static size_t html_tag(HtmlText *h, const char *s, size_t n, const char **ret_skip, int *ret) {
        const char *end = memchr(s, '>', n);
        char name[16];
        size_t i = 1 + (n > 1 && s[1] == '/'), k = 0;

        if (n >= 4 && memcmp(s, "<!--", 4) == 0) {
                const char *c = memmem(s, n, "-->", 3);
                return c ? (size_t) (c - s) + 3 : n;
        }
        if (!end)
                return 0;
        while (i < n && k + 1 < sizeof name &&
               ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (k > 0 && s[i] >= '0' && s[i] <= '9')))
                name[k++] = (char) (s[i++] | 0x20);
        name[k] = '\0';
        /* "a < b": no tag, text. */
        if (k == 0 && s[1] != '/' && s[1] != '!' && s[1] != '?')
                return 0;
        if (s[1] != '/' && (streq(name, "script") || streq(name, "style")))
                *ret_skip = streq(name, "script") ? "</script" : "</style";
        if (html_tag_is_block(name))
                *ret = html_newline(h);
        else if (s[1] != '/' && (streq(name, "td") || streq(name, "th")) && h->out.len > 0 &&
                 h->out.s[h->out.len - 1] != '\n') {
                h->space = false;
                *ret = buf_put(&h->out, "\t", 1);
        }
        return (size_t) (end - s) + 1;
}

char *cell_render_html_text(const char *s, size_t n) {
        HtmlText h = {};
        const char *skip = NULL;
        size_t i = 0;
        int k = buf_put(&h.out, "", 0);

        while (k >= 0 && i < n) {
                size_t used = 0;

                if (skip) {
                        /* Up to the element's end tag: what is inside is code, not text. */
                        size_t sl = strlen(skip), j = i;

                        while (j + sl <= n && strncasecmp(s + j, skip, sl) != 0)
                                j++;
                        i = j + sl <= n ? j : n;
                        skip = NULL;
                        continue;
                }
                if (s[i] == '<')
                        used = html_tag(&h, s + i, n - i, &skip, &k);
                else if (s[i] == '&')
                        used = html_entity(&h, s + i, n - i, &k);
                else if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f') {
                        h.space = true;
                        used = 1;
                }
                if (used == 0) {
                        used = char_length(s + i, n - i);
                        k = html_char(&h, s + i, used);
                }
                i += used;
        }
        if (k >= 0)
                k = html_newline(&h);
        while (k >= 0 && h.out.len > 0 && h.out.s[h.out.len - 1] == '\n')
                h.out.s[--h.out.len] = '\0';
        if (k < 0) {
                free(h.out.s);
                return NULL;
        }
        h.out.s[h.out.len] = '\0';
        return h.out.s;
}

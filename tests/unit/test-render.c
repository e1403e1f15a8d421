/* The renderer of a cell's outputs for a model (src/client/render.h), on hand-built messages: stream text as a
 * terminal leaves it (within and across messages), the best form of a rich result, an error cut to its cell's
 * frames, and the budget's head and tail. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "tap.h"
#include "util.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct Capture {
        char *text[_CELL_RENDER_TARGET_MAX];
        size_t len[_CELL_RENDER_TARGET_MAX];
        size_t pieces;
        bool pieces_valid; /* every piece emitted was whole UTF-8 */
} Capture;

static bool utf8_valid(const char *s, size_t n) {
        for (size_t i = 0; i < n;) {
                size_t k = utf8_sequence(s + i, n - i, NULL);

                if (k == 0)
                        return false;
                i += k;
        }
        return true;
}

static void capture_emit(CellRenderTarget t, const char *s, size_t n, void *userdata) {
        Capture *c = userdata;

        c->text[t] = realloc(c->text[t], c->len[t] + n + 1);
        memcpy(c->text[t] + c->len[t], s, n);
        c->len[t] += n;
        c->text[t][c->len[t]] = '\0';
        c->pieces++;
        if (!utf8_valid(s, n))
                c->pieces_valid = false;
}

static void capture_done(Capture *c) {
        for (size_t t = 0; t < _CELL_RENDER_TARGET_MAX; t++)
                free(c->text[t]);
}

static const char *out_of(Capture *c, CellRenderTarget t) {
        return c->text[t] ?: "";
}

static json_t *stream(const char *name, const char *text) {
        return json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", name, "text", text);
}

static json_t *stream_n(const char *name, const char *text, size_t n) {
        return json_pack("{s:s, s:s, s:s%}", "output_type", "stream", "name", name, "text", text, n);
}

/* Renders the outputs (a NULL-terminated list, taken) with budget max; the texts into c. */
static int render_all(Capture *c, size_t max, bool traceback, size_t *ret_kept, size_t *ret_dropped, ...) {
        CellRender *r = cell_render_new(max, traceback, capture_emit, c);
        va_list ap;
        json_t *o;
        int k;

        *c = (Capture){ .pieces_valid = true };
        va_start(ap, ret_dropped);
        while ((o = va_arg(ap, json_t *))) {
                (void) cell_render_output(r, o);
                json_decref(o);
        }
        va_end(ap);
        k = cell_render_finish(r, ret_kept, ret_dropped);
        cell_render_free(r);
        return k;
}

#define RENDER(c, ...) render_all(c, 0, false, NULL, NULL, __VA_ARGS__, NULL)

static void test_carriage_return(void) {
        Capture c;

        RENDER(&c, stream("stdout", "10%\r50%\r100%\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "100%\n", "\\r: a line's frames collapse to the last");
        capture_done(&c);

        RENDER(&c, stream("stdout", "abcdef\rXY\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "XYcdef\n", "\\r: a shorter frame overwrites only its own width");
        capture_done(&c);

        RENDER(&c, stream("stdout", "load: 10%"), stream("stdout", "\rload: 99%"), stream("stdout", "\rload: 100%\n"),
               stream("stdout", "done\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "load: 100%\ndone\n", "\\r: frames in separate messages collapse too");
        capture_done(&c);

        RENDER(&c, stream("stdout", "line\r"), stream("stdout", "\nnext\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "line\nnext\n", "\\r\\n split over two messages keeps the line");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\xc3\xa9\xc3\xa9\xc3\xa9\r"), stream("stdout", "ab\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "ab\xc3\xa9\n", "\\r: overwriting is by character, not by byte");
        ok(c.pieces_valid, "\\r over multi-byte characters leaves valid UTF-8");
        capture_done(&c);

        RENDER(&c, stream("stdout", "ab\bc\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "ac\n", "backspace moves back one character");
        capture_done(&c);

        RENDER(&c, stream("stdout", "50%"));
        is_str(out_of(&c, CELL_RENDER_OUT), "50%\n", "an unfinished line ends at the cell's end, on its own line");
        capture_done(&c);

        RENDER(&c, stream("stderr", "bar 1/3\r"), stream("stdout", "a line\n"), stream("stderr", "bar 3/3\n"));
        ok(streq(out_of(&c, CELL_RENDER_OUT), "a line\n") && streq(out_of(&c, CELL_RENDER_ERR), "bar 3/3\n"),
           "stdout and stderr each have their own line: a print does not break a stderr bar's collapse");
        capture_done(&c);
}

static void test_ansi(void) {
        Capture c;

        RENDER(&c, stream("stdout", "\x1b[31mred\x1b[0m \x1b[1;38;5;208mbold\x1b[m\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "red bold\n", "CSI colour sequences are removed");
        capture_done(&c);

        RENDER(&c, stream("stdout", "a\x1b[3"), stream("stdout", "1mred\x1b"), stream("stdout", "[0m\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "ared\n", "a CSI split over messages (after ESC, inside the parameters)");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\x1b]0;my ti"),
               stream("stdout", "tle\x07"
                                "after\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "after\n", "an OSC split over messages, ended by BEL");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b"), stream("stdout", "\\ end\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "link end\n", "an OSC hyperlink ended by ESC \\ (split at the ST)");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\x1b"
                                    "cX\x1b(B\x1b"
                                    "7Y\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "XY\n", "simple ESC x and ESC ( B are removed");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\x1b[2K\r\x1b[A50%\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "50%\n", "cursor and erase sequences go too");
        capture_done(&c);

        RENDER(&c, stream("stdout", "A\x1b["), stream("stderr", "x\n"), stream("stdout", "1mB\n"));
        ok(streq(out_of(&c, CELL_RENDER_OUT), "AB\n") && streq(out_of(&c, CELL_RENDER_ERR), "x\n"),
           "an escape open on stdout does not eat stderr's text (one state machine per stream)");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\x1b\xc3\xa9\n"));
        ok(streq(out_of(&c, CELL_RENDER_OUT), "\xc3\xa9\n") && c.pieces_valid,
           "an ESC before a multi-byte character drops only the ESC");
        capture_done(&c);

        RENDER(&c, stream("stdout", "\xc2\x9b"
                                    "31mred\xc2\x85"
                                    "\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "red\n", "C1 controls in UTF-8 (CSI U+009B, NEL) are removed");
        capture_done(&c);

        RENDER(&c, stream_n("stdout",
                            "a\0b\x07"
                            "c\x7f\n",
                            7));
        ok(c.len[CELL_RENDER_OUT] == 5 && memcmp(out_of(&c, CELL_RENDER_OUT), "a\0bc\n", 5) == 0,
           "BEL and DEL are removed, a NUL is kept as the byte (as a notebook's text holds it)");
        capture_done(&c);

        {
                /* A stray OSC that never ends: text again after its bound, the end of the cell kept. */
                size_t n = 10000;
                char *big = malloc(n + 16);

                memcpy(big, "\x1b]", 2);
                memset(big + 2, 'x', n);
                strcpy(big + 2 + n, "\nTHE END\n");
                RENDER(&c, stream("stdout", big));
                ok(strstr(out_of(&c, CELL_RENDER_OUT), "THE END\n") != NULL,
                   "an unended OSC does not swallow the cell");
                capture_done(&c);
                free(big);
        }
}

static json_t *display(const char *type, json_t *data) {
        return json_pack("{s:s, s:o, s:{}}", "output_type", type, "data", data, "metadata");
}

static void test_rich(void) {
        _cleanup_free_ char *png = malloc(24577);
        Capture c;

        memset(png, 'A', 24576);
        png[24576] = '\0'; /* 18 KiB once decoded */
        RENDER(&c, display("display_data", json_pack("{s:s, s:s}", "text/plain", "<Figure size 640x480 with 1 Axes>",
                                                     "image/png", png)));
        is_str(out_of(&c, CELL_RENDER_OUT), "[image/png 18 KB]\n",
               "a plot: its placeholder text/plain is absent, the image named with its size");
        capture_done(&c);

        RENDER(&c,
               display("display_data", json_pack("{s:s, s:s}", "text/plain", "<IPython.core.display.Markdown object>",
                                                 "text/markdown", "# hi\n\n*there*")));
        is_str(out_of(&c, CELL_RENDER_OUT), "# hi\n\n*there*\n", "Markdown: text/markdown is shown");
        capture_done(&c);

        RENDER(&c, display("execute_result",
                           json_pack("{s:s, s:s}", "text/plain", "a real text", "text/markdown", "**md**")));
        is_str(out_of(&c, CELL_RENDER_OUT), "**md**\n", "text/markdown is preferred over a real text/plain");
        capture_done(&c);

        RENDER(&c, display("display_data",
                           json_pack("{s:s, s:s}", "text/plain", "<IPython.core.display.HTML object>", "text/html",
                                     "<!-- c --><h1>Title</h1><p>a &amp; b&#33; &lt;x&gt; &#x20AC;</p>"
                                     "<table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>"
                                     "<script>if (a<b) x();</script><style>p {}</style>a < b")));
        is_str(out_of(&c, CELL_RENDER_OUT), "Title\na & b! <x> \xe2\x82\xac\nk\tv\n1\t2\na < b\n",
               "HTML with a placeholder text/plain: reduced to text (tags, entities, tables, script)");
        capture_done(&c);

        RENDER(&c, display("execute_result", json_pack("{s:s, s:s}", "text/plain", "   a\n0  1", "text/html",
                                                       "<table><tr><td>1</td></tr></table>")));
        is_str(out_of(&c, CELL_RENDER_OUT), "   a\n0  1\n[text/html 34 B]\n",
               "a DataFrame: its text/plain, and the html named");
        capture_done(&c);

        RENDER(&c, display("execute_result", json_pack("{s:s}", "text/plain", "<object object at 0x7f00>")));
        is_str(out_of(&c, CELL_RENDER_OUT), "<object object at 0x7f00>\n", "a placeholder alone is shown");
        capture_done(&c);

        RENDER(&c, display("display_data", json_pack("{s:s}", "image/png", "AAAA")));
        is_str(out_of(&c, CELL_RENDER_OUT), "[image/png 3 B]\n", "an image without text: named with its size");
        capture_done(&c);

        RENDER(&c, display("display_data", json_pack("{s:{s:i}}", "application/json", "a", 1)));
        is_str(out_of(&c, CELL_RENDER_OUT), "[application/json 7 B]\n", "a JSON value's size is its text's");
        capture_done(&c);

        RENDER(&c, stream("stdout", "abc"),
               display("execute_result", json_pack("{s:s}", "text/plain", "\x1b[1m6\x1b[0m")),
               stream("stdout", "\rX\n"));
        is_str(out_of(&c, CELL_RENDER_OUT), "abc\n6\nX\n",
               "a result ends the stream's line before it; its own ANSI is removed; a \\r after it starts afresh");
        capture_done(&c);
}

static json_t *error(json_t *tb) {
        return json_pack("{s:s, s:s, s:s, s:o}", "output_type", "error", "ename", "ZeroDivisionError", "evalue",
                         "division by zero", "traceback", tb);
}

static json_t *nested_traceback(void) {
        return json_pack("[s, s, s, s, s, s]", "\x1b[0;31m-------------------------------------\x1b[0m",
                         "\x1b[0;31mZeroDivisionError\x1b[0m     Traceback (most recent call last)",
                         "Cell \x1b[0;32mIn[2], line 5\x1b[0m\n\x1b[0;32m----> 5\x1b[0m g()\n",
                         "File \x1b[0;32m/usr/lib/python3/x.py:3\x1b[0m, in \x1b[0;36mh\x1b[0m()\n----> 3 f()\n",
                         "Cell \x1b[0;32mIn [2], line 2\x1b[0m, in \x1b[0;36mf\x1b[0;34m()\x1b[0m\n----> 2 1/0\n",
                         "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero");
}

typedef struct Saved {
        int result;
        char data[64];
        size_t n, calls;
} Saved;

static int save_form(const char *mime, const void *data, size_t n, char **ret_path, void *userdata) {
        Saved *sv = userdata;

        sv->calls++;
        sv->n = n;
        memcpy(sv->data, data, MIN(n, sizeof sv->data));
        if (sv->result < 0)
                return sv->result;
        return asprintf(ret_path, "/out/output-%zu.%s", sv->calls, strchr(mime, '/') + 1) < 0 ? -ENOMEM : 0;
}

static void test_save(void) {
        Saved sv = {};
        Capture c = { .pieces_valid = true };
        CellRender *r = cell_render_new(0, false, capture_emit, &c);
        json_t *o = display("display_data",
                            json_pack("{s:s, s:s, s:s, s:s}", "text/plain", "<Figure size 1x1>", "image/png",
                                      "aGVs\nbG8=", "image/svg+xml", "<svg/>", "image/jpeg", "not base64!"));
        char *d = NULL;
        size_t n = 0;

        cell_render_set_save(r, save_form, &sv);
        cell_render_output(r, o);
        json_decref(o);
        sv.result = -ENOSPC;
        o = display("display_data", json_pack("{s:s}", "image/gif", "R0lG"));
        cell_render_output(r, o);
        json_decref(o);
        cell_render_finish(r, NULL, NULL);
        cell_render_free(r);
        is_str(out_of(&c, CELL_RENDER_OUT),
               "[image/png 5 B: /out/output-1.png]\n[image/svg+xml 6 B]\n[image/jpeg 6 B: not saved: not base64]\n"
               "[image/gif 3 B: not saved: No space left on device]\n",
               "--save-images: each binary form's line names its path, or why it was not saved; a text form is not "
               "saved");
        ok(sv.calls == 2 && sv.n == 3 && memcmp(sv.data, "GIF", 3) == 0,
           "the save hook gets the decoded bytes (GIF from R0lG)");
        capture_done(&c);

        ok(cell_render_base64_decode("aGVsbG8=", 8, &d, &n) == 0 && n == 5 && streq(d, "hello"), "base64: hello");
        free(d);
        ok(cell_render_base64_decode("aGVs\r\nbG8", 9, &d, &n) == 0 && n == 5 && streq(d, "hello"),
           "base64: whitespace ignored, padding optional");
        free(d);
        d = NULL;
        ok(cell_render_base64_decode("aGVsb", 5, &d, &n) == -EINVAL && !d,
           "base64: a lone sixth of a byte is refused");
        ok(cell_render_base64_decode("aG=Vs", 5, &d, &n) == -EINVAL, "base64: data after padding is refused");
        ok(cell_render_base64_decode("aG$s", 4, &d, &n) == -EINVAL, "base64: a byte outside the alphabet is refused");
}

static void test_error(void) {
        Capture c;

        RENDER(&c, error(nested_traceback()));
        is_str(out_of(&c, CELL_RENDER_ERR),
               "Cell In[2], line 5\n----> 5 g()\nCell In [2], line 2, in f()\n----> 2 1/0\nZeroDivisionError: "
               "division by zero\n",
               "an error: the cell's frames (Cell In[), no library frame, no ANSI, then Name: value");
        ok(out_of(&c, CELL_RENDER_OUT)[0] == '\0', "an error goes to stderr only");
        capture_done(&c);

        render_all(&c, 0, true, NULL, NULL, error(nested_traceback()), NULL);
        ok(strstr(out_of(&c, CELL_RENDER_ERR), "File /usr/lib/python3/x.py:3, in h()\n") &&
                   strstr(out_of(&c, CELL_RENDER_ERR), "Traceback (most recent call last)") &&
                   !strchr(out_of(&c, CELL_RENDER_ERR), '\x1b'),
           "traceback: every frame, without ANSI");
        capture_done(&c);

        RENDER(&c, json_pack("{s:s, s:s, s:s%}", "output_type", "error", "ename", "ValueError", "evalue", "bad\0byte",
                             (size_t) 8));
        ok(c.len[CELL_RENDER_ERR] == 21 && memcmp(out_of(&c, CELL_RENDER_ERR), "ValueError: bad\0byte\n", 21) == 0,
           "an error's value with a NUL: whole");
        capture_done(&c);

        RENDER(&c, json_pack("{s:s, s:s}", "output_type", "error", "ename", "KeyError"));
        is_str(out_of(&c, CELL_RENDER_ERR), "KeyError\n", "an error without value or traceback: its name");
        capture_done(&c);

        RENDER(&c, stream("stdout", "partial"), error(json_array()));
        ok(streq(out_of(&c, CELL_RENDER_OUT), "partial\n") &&
                   streq(out_of(&c, CELL_RENDER_ERR), "ZeroDivisionError: division by zero\n"),
           "an error ends the stream's line before it");
        capture_done(&c);
}

/* The text of n_lines lines "line N\n" fed in messages of uneven sizes through budget max, checked against the
 * head and tail cut from the whole text. */
static void budget_against(size_t max, size_t n_lines) {
        _cleanup_free_ char *full = NULL, *want = NULL;
        size_t len = 0, kept, dropped, head = max / 2, tail = max - head, lines = 0;
        CellRender *r;
        Capture c = { .pieces_valid = true };
        int k;

        full = malloc(n_lines * 16 + 1);
        for (size_t i = 0; i < n_lines; i++)
                len += (size_t) sprintf(full + len, "line %zu\n", i);
        r = cell_render_new(max, false, capture_emit, &c);
        for (size_t i = 0, step = 1; i < len; i += step, step = step % 37 + 1) {
                json_t *o = stream_n("stdout", full + i, MIN(step, len - i));

                cell_render_output(r, o);
                json_decref(o);
        }
        k = cell_render_finish(r, &kept, &dropped);
        cell_render_free(r);
        for (size_t i = head; i < len - tail; i++)
                lines += full[i] == '\n';
        if (asprintf(&want, "%.*s%s[... %zu bytes, %zu lines dropped ...]\n%s", (int) head, full,
                     full[head - 1] == '\n' ? "" : "\n", len - max, lines, full + len - tail) < 0)
                want = NULL;
        ok(want && k == 1 && kept == max && dropped == len - max && streq(out_of(&c, CELL_RENDER_OUT), want),
           "budget %zu over %zu bytes in uneven messages: head, marker with bytes and lines, tail exact", max, len);
        if (want && !streq(out_of(&c, CELL_RENDER_OUT), want))
                printf("#   got %s\n#   want %s\n", out_of(&c, CELL_RENDER_OUT), want);
        capture_done(&c);
}

static void test_budget(void) {
        size_t kept = 0, dropped = 99;
        Capture c;
        int k;
        /* Ten "0123456789\n": 110 bytes. */
        const char *ten = "0123456789\n0123456789\n0123456789\n0123456789\n0123456789\n"
                          "0123456789\n0123456789\n0123456789\n0123456789\n0123456789\n";

        k = render_all(&c, 16, false, &kept, &dropped, stream("stdout", ten), NULL);
        is_str(out_of(&c, CELL_RENDER_OUT), "01234567\n[... 94 bytes, 9 lines dropped ...]\n3456789\n",
               "budget 16: the first 8 bytes, the marker, the last 8");
        ok(k == 1 && kept == 16 && dropped == 94, "budget 16: kept 16, dropped 94 (got %zu, %zu)", kept, dropped);
        capture_done(&c);

        /* Ten euro signs (3 bytes each), x, newline: 32 bytes. The head's 5 bytes end inside the second euro, the
         * tail's 7 start inside the ninth. */
        k = render_all(&c, 10, false, &kept, &dropped,
                       stream("stdout",
                              "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"
                              "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xacx\n"),
                       NULL);
        is_str(out_of(&c, CELL_RENDER_OUT), "\xe2\x82\xac\n[... 24 bytes, 0 lines dropped ...]\n\xe2\x82\xacx\n",
               "budget at UTF-8 boundaries: head and tail in whole characters");
        ok(k == 1 && kept == 8 && dropped == 24 && c.pieces_valid,
           "budget at UTF-8 boundaries: kept 8, dropped 24, every piece valid UTF-8 (got %zu, %zu)", kept, dropped);
        capture_done(&c);

        k = render_all(&c, 1024, false, &kept, &dropped, stream("stdout", ten), NULL);
        ok(k == 0 && kept == 110 && dropped == 0 && streq(out_of(&c, CELL_RENDER_OUT), ten),
           "within the budget: everything, no marker");
        capture_done(&c);

        k = render_all(&c, 0, false, &kept, &dropped, stream("stdout", "abc"), NULL);
        ok(k == 0 && kept == 4 && streq(out_of(&c, CELL_RENDER_OUT), "abc\n"),
           "kept counts the unfinished last line, ended at the cell's end (got %zu; found by fuzz-render)", kept);
        capture_done(&c);
        k = render_all(&c, 1024, false, &kept, &dropped, stream("stdout", "abc"), NULL);
        ok(k == 0 && kept == 4, "and so within a budget (got %zu)", kept);
        capture_done(&c);

        k = render_all(&c, 0, false, &kept, &dropped, stream("stdout", ten), NULL);
        ok(k == 0 && kept == 110 && dropped == 0 && streq(out_of(&c, CELL_RENDER_OUT), ten), "budget 0: none");
        capture_done(&c);

        k = render_all(&c, 40, false, &kept, &dropped, stream("stdout", ten), stream("stdout", ten),
                       stream("stderr", "THE END\n"), NULL);
        ok(k == 1 && strstr(out_of(&c, CELL_RENDER_OUT), "[... 188 bytes, 17 lines dropped ...]\n") &&
                   streq(out_of(&c, CELL_RENDER_ERR), "THE END\n"),
           "the tail keeps each piece's stream: stderr's last line still on stderr");
        if (!strstr(out_of(&c, CELL_RENDER_OUT), "[... 188"))
                printf("#   got %d: [%s] [%s]\n", k, out_of(&c, CELL_RENDER_OUT), out_of(&c, CELL_RENDER_ERR));
        capture_done(&c);

        budget_against(100, 1000);
        budget_against(4096, 100000);
        budget_against(1001, 333);
}

static void test_hostile(void) {
        size_t n = 200000;
        _cleanup_free_ char *big = malloc(n + 3);
        Capture c;

        memset(big, 'a', n);
        strcpy(big + n, "\rX");
        RENDER(&c, stream("stdout", big));
        ok(c.len[CELL_RENDER_OUT] == n + 1 && out_of(&c, CELL_RENDER_OUT)[0] == 'a' &&
                   out_of(&c, CELL_RENDER_OUT)[(n / 65536) * 65536] == 'X',
           "a 200 KB line without newline: let out in bounded pieces, a \\r overwrites only the last piece");
        capture_done(&c);
}

static void test_line_bound(void) {
        _cleanup_free_ char *line = malloc(65537);
        Capture c;

        memset(line, 'x', 65536);
        line[65536] = '\0';
        RENDER(&c, stream("stdout", line));
        ok(c.len[CELL_RENDER_OUT] == 65537 && out_of(&c, CELL_RENDER_OUT)[65536] == '\n',
           "a line of exactly the bound, let out whole, still gets its end at the cell's end");
        capture_done(&c);

        {
                /* 70,000 euro signs: the bound (65,536) falls inside one. */
                size_t n = 70000 * 3;
                _cleanup_free_ char *euros = malloc(n + 1);

                for (size_t i = 0; i < n; i += 3)
                        memcpy(euros + i, "\xe2\x82\xac", 3);
                euros[n] = '\0';
                RENDER(&c, stream("stdout", euros));
                ok(c.pieces_valid && c.pieces > 1 && c.len[CELL_RENDER_OUT] == n + 1 &&
                           memcmp(out_of(&c, CELL_RENDER_OUT), euros, n) == 0,
                   "a long line of three-byte characters: let out in pieces of whole characters, nothing lost");
                capture_done(&c);
        }
}

/* Random cells of escapes, controls and characters of every length, in random messages, under random budgets:
 * every piece emitted is whole UTF-8, and the text kept (all but the marker) is within the budget. */
static void test_random(void) {
        static const char *const pieces[] = { "\x1b", "[",  "]",        "\r",           "\n",
                                              "\b",   "a",  "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                              "\x07", "\\", "31m",      "\xc2\x9b",     "P",
                                              "(" };
        unsigned seed = 26;
        bool all_valid = true, all_within = true;

        for (int cell = 0; cell < 300; cell++) {
                size_t max = (size_t) (rand_r(&seed) % 3) * (size_t) (rand_r(&seed) % 200 + 1), kept = 0, dropped = 0,
                       shown;
                Capture c = { .pieces_valid = true };
                CellRender *r = cell_render_new(max, false, capture_emit, &c);
                char msg[256];

                for (int m = 0; m < 40; m++) {
                        size_t n = 0;
                        json_t *o;

                        while (n < 200) {
                                const char *p = pieces[rand_r(&seed) % ELEMENTSOF(pieces)];

                                memcpy(msg + n, p, strlen(p));
                                n += strlen(p);
                        }
                        msg[n] = '\0';
                        o = stream(rand_r(&seed) % 4 ? "stdout" : "stderr", msg);
                        cell_render_output(r, o);
                        json_decref(o);
                }
                (void) cell_render_finish(r, &kept, &dropped);
                cell_render_free(r);
                shown = c.len[CELL_RENDER_OUT] + c.len[CELL_RENDER_ERR];
                all_valid = all_valid && c.pieces_valid;
                /* The marker is at most 80 bytes. */
                all_within = all_within && (max == 0 || (kept <= max && shown <= kept + (dropped ? 80 : 0)));
                capture_done(&c);
        }
        ok(all_valid, "300 random cells of escapes and characters: every piece emitted is whole UTF-8");
        ok(all_within, "300 random cells under random budgets: what is kept is within the budget");
}

static void test_pure(void) {
        char buf[32];

        is_str(cell_render_format_size(buf, sizeof buf, 18432), "18 KB", "size 18432: 18 KB");
        is_str(cell_render_format_size(buf, sizeof buf, 512), "512 B", "size 512: 512 B");
        is_str(cell_render_format_size(buf, sizeof buf, 2621440), "2.5 MB", "size 2.5 MiB: 2.5 MB");
        ok(cell_render_is_placeholder("<Figure size 640x480 with 1 Axes>", 33), "a Figure is a placeholder");
        ok(!cell_render_is_placeholder("<b>bold</b>", 11), "markup is no placeholder");
        ok(!cell_render_is_placeholder("[<matplotlib.lines.Line2D at 0x7f>]", 35),
           "a list of reprs is no placeholder");
}

int main(void) {
        test_carriage_return();
        test_ansi();
        test_rich();
        test_save();
        test_error();
        test_budget();
        test_hostile();
        test_line_bound();
        test_random();
        test_pure();
        return tap_done();
}

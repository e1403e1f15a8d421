/* libFuzzer harness: the renderer of a cell's text (src/client/render.c), which every front end runs on whatever a
 * kernel prints. The input: two bytes of budget (0: none, else 1 to 65,536 bytes), a byte of flags (bit 0: whole
 * tracebacks; bit 1: a save hook, which fails every other time), then messages apart by 0xFF (never a byte of UTF-8).
 * A message that parses as a JSON object is an output as it is; any other is the text of a stream (stdout or stderr by
 * its first byte), repaired to UTF-8 as jansson's strings are. Properties: every piece emitted is whole UTF-8 and
 * names a target; finish says 0 or 1; what is kept is within the budget, and only a marker line is added to it;
 * nothing leaks. */
#include "fuzz-util.h"
#include "render.h"
#include "util.h"

typedef struct Seen {
        size_t shown;
} Seen;

static void check_piece(CellRenderTarget t, const char *s, size_t n, void *userdata) {
        Seen *seen = userdata;

        FUZZ_CHECK(t == CELL_RENDER_OUT || t == CELL_RENDER_ERR);
        FUZZ_CHECK(n > 0);
        for (size_t i = 0; i < n;) {
                size_t k = utf8_sequence(s + i, n - i, NULL);

                FUZZ_CHECK(k > 0);
                i += k;
        }
        seen->shown += n;
}

/* A save hook that keeps nothing: a path for one form, EIO for the next. */
static int save_form(const char *mime, const void *data, size_t n, char **ret_path, void *userdata) {
        unsigned *calls = userdata;

        FUZZ_CHECK(mime && (data || n == 0));
        if ((*calls)++ % 2)
                return -EIO;
        *ret_path = strdup("/saved/output-1.png");
        return *ret_path ? 0 : -ENOMEM;
}

static void feed(CellRender *r, const char *s, size_t n) {
        json_t *out = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        char *text = NULL;
        size_t len = n;

        if (!json_is_object(out)) {
                json_decref(out);
                if (utf8_repair(s, n, &text, &len) < 0)
                        return;
                out = json_pack("{s:s, s:s, s:s%}", "output_type", "stream", "name",
                                n > 0 && (s[0] & 1) ? "stderr" : "stdout", "text", text ?: s, len);
                free(text);
        }
        if (out)
                (void) cell_render_output(r, out);
        json_decref(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Seen seen = {};
        unsigned calls = 0;
        size_t max, kept = 0, dropped = 0;
        const char *p, *end;
        CellRender *r;
        int k;

        if (size < 3)
                return -1;
        max = ((size_t) data[0] << 8 | data[1]);
        max = max == 0 ? 0 : max + 1;
        r = cell_render_new(max, data[2] & 1, check_piece, &seen);
        if (!r)
                return 0;
        if (data[2] & 2)
                cell_render_set_save(r, save_form, &calls);
        p = (const char *) data + 3;
        end = (const char *) data + size;
        while (p <= end) {
                const char *sep = memchr(p, 0xFF, (size_t) (end - p));
                const char *stop = sep ? sep : end;

                feed(r, p, (size_t) (stop - p));
                p = stop + 1;
        }
        k = cell_render_finish(r, &kept, &dropped);
        cell_render_free(r);
        FUZZ_CHECK(k == 0 || k == 1 || k == -ENOMEM);
        if (k >= 0 && max > 0) {
                FUZZ_CHECK(kept <= max);
                /* The marker: "\n[... N bytes, L lines dropped ...]\n", under 80 bytes. */
                FUZZ_CHECK(seen.shown <= kept + (k == 1 ? 80 : 0));
                FUZZ_CHECK((k == 1) == (dropped > 0));
        }
        if (k >= 0 && max == 0)
                FUZZ_CHECK(seen.shown == kept && dropped == 0);
        return 0;
}

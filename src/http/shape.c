/* The shapes of shape.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "shape.h"
#include "util.h"

static const struct {
        const char *mime, *key;
} formats[] = {
        { "text/plain", "text" },        { "text/html", "html" },
        { "text/markdown", "markdown" }, { "image/svg+xml", "svg" },
        { "image/png", "png" },          { "image/jpeg", "jpeg" },
        { "application/pdf", "pdf" },    { "text/latex", "latex" },
        { "application/json", "json" },  { "application/javascript", "javascript" },
};

/* nbformat keeps text as a string or a list of strings (lines); apps want the string. */
static json_t *text_of(const json_t *v) {
        const json_t *line;
        size_t i, len = 0;
        char *s, *w;
        json_t *j;

        if (!json_is_array(v))
                return json_deep_copy(v);
        json_array_foreach(v, i, line) len += json_string_length(line);
        s = w = malloc(len + 1);
        if (!s)
                return NULL;
        json_array_foreach(v, i, line) {
                memcpy(w, json_string_value(line) ?: "", json_string_length(line));
                w += json_string_length(line);
        }
        j = json_stringn_nocheck(s, len);
        free(s);
        return j;
}

static const char *format_key(const char *mime) {
        for (size_t i = 0; i < ELEMENTSOF(formats); i++)
                if (streq(formats[i].mime, mime))
                        return formats[i].key;
        return NULL;
}

int shape_result(const json_t *output, const char *main_key, json_t **ret) {
        const char *type = json_string_value(json_object_get(output, "output_type")), *mime;
        const json_t *data = json_object_get(output, "data"), *v;
        json_auto_t *r = json_object(), *extra = json_object();

        if (!type || (!streq(type, "display_data") && !streq(type, "execute_result")) || !json_is_object(data))
                return -EINVAL;
        if (!r || !extra)
                return -ENOMEM;
        json_object_foreach((json_t *) data, mime, v) {
                const char *key = format_key(mime);
                json_t *t = streq(mime, "application/json") ? json_deep_copy(v) : text_of(v);

                if (!t || json_object_set_new(key ? r : extra, key ?: mime, t) < 0)
                        return -ENOMEM;
        }
        if (json_object_size(extra) > 0 && json_object_set(r, "extra", extra) < 0)
                return -ENOMEM;
        if (json_object_set_new(r, main_key, json_boolean(streq(type, "execute_result"))) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(r);
        return 0;
}

static int shape_error(const json_t *output, json_t **ret) {
        const json_t *tb = json_object_get(output, "traceback");
        json_t *e = json_pack("{s:O?, s:O?, s:o}", "name", json_object_get(output, "ename"), "value",
                              json_object_get(output, "evalue"), "traceback",
                              json_is_array(tb) ? json_incref((json_t *) tb) : json_array());

        if (!e)
                return -ENOMEM;
        *ret = e;
        return 0;
}

int shape_execution(const json_t *outputs, json_t **ret) {
        json_auto_t *stdout_ = json_array(), *stderr_ = json_array(), *results = json_array(), *error = NULL;
        const json_t *o;
        size_t i;
        int r;

        if (!stdout_ || !stderr_ || !results)
                return -ENOMEM;
        json_array_foreach(outputs, i, o) {
                const char *type = json_string_value(json_object_get(o, "output_type"));
                json_t *res = NULL;

                if (!type)
                        continue;
                if (streq(type, "stream")) {
                        const char *name = json_string_value(json_object_get(o, "name"));
                        json_t *t = text_of(json_object_get(o, "text"));
                        if (!t || json_array_append_new(name && streq(name, "stderr") ? stderr_ : stdout_, t) < 0)
                                return -ENOMEM;
                } else if (streq(type, "error")) {
                        json_decref(error);
                        error = NULL;
                        if (shape_error(o, &error) < 0)
                                return -ENOMEM;
                } else if ((r = shape_result(o, "isMainResult", &res)) >= 0) {
                        if (json_array_append_new(results, res) < 0)
                                return -ENOMEM;
                } else if (r == -ENOMEM)
                        return r;
        }
        *ret = json_pack("{s:{s:O, s:O}, s:O, s:O?}", "logs", "stdout", stdout_, "stderr", stderr_, "results", results,
                         "error", error ?: json_null());
        return *ret ? 0 : -ENOMEM;
}

static void text_emit(CellRenderTarget target, const char *s, size_t n, void *userdata) {
        (void) target;
        fwrite(s, 1, n, userdata);
}

int shape_text(const json_t *outputs, size_t max_output, bool traceback, char **ret_text, size_t *ret_kept,
               size_t *ret_dropped) {
        char *text = NULL;
        size_t len = 0, kept = 0, dropped = 0;
        FILE *f = open_memstream(&text, &len);
        CellRender *cr = f ? cell_render_new(max_output, traceback, text_emit, f) : NULL;
        const json_t *o;
        size_t i;
        int r = cr ? 0 : -ENOMEM;

        json_array_foreach(outputs, i, o) {
                if (r >= 0)
                        r = cell_render_output(cr, o);
        }
        if (r >= 0)
                r = cell_render_finish(cr, &kept, &dropped);
        cell_render_free(cr);
        if (f && fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                free(text);
                return r;
        }
        *ret_text = text;
        if (ret_kept)
                *ret_kept = kept;
        if (ret_dropped)
                *ret_dropped = dropped;
        return 0;
}

/* The shaping of a cell's outputs: see exec-cell.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-cell.h"

void cell_free(ExecCell *cell) {
        if (!cell)
                return;
        free(cell->code);
        json_decref(cell->outputs);
        json_decref(cell->display_ids);
        free(cell->pend_name);
        free(cell->pend);
        free(cell->reply_status);
        free(cell);
}

/* Appends output (stolen) and its display_id (borrowed, may be NULL) to the collected outputs. */
static int cell_append(ExecCell *cell, json_t *output, const char *display_id) {
        if (!output)
                return -ENOMEM;
        if (json_array_append_new(cell->outputs, output) < 0)
                return -ENOMEM;
        if (json_array_append_new(cell->display_ids, display_id ? json_string(display_id) : json_null()) < 0) {
                (void) json_array_remove(cell->outputs, json_array_size(cell->outputs) - 1);
                return -ENOMEM;
        }
        return 0;
}

/* Turns the pending stream text into an output dict. */
int cell_flush_stream(ExecCell *cell) {
        json_t *o;
        int r;

        if (!cell->pend_name)
                return 0;
        o = json_pack("{s:s, s:s, s:s%}", "output_type", "stream", "name", cell->pend_name, "text", cell->pend ?: "",
                      cell->pend_len);
        r = cell_append(cell, o, NULL);
        free(cell->pend_name);
        cell->pend_name = NULL;
        cell->pend_len = 0;
        return r;
}

static int cell_pend_stream(ExecCell *cell, const char *name, const char *text, size_t len) {
        if (cell->pend_name && !streq(cell->pend_name, name)) {
                int r = cell_flush_stream(cell);
                if (r < 0)
                        return r;
        }
        if (!cell->pend_name) {
                cell->pend_name = strdup(name);
                if (!cell->pend_name)
                        return -ENOMEM;
                cell->pend_len = 0;
        }
        if (cell->pend_len + len + 1 > cell->pend_alloc) {
                size_t want = (cell->pend_len + len + 1) * 2;
                char *p = realloc(cell->pend, want);

                if (!p)
                        return -ENOMEM;
                cell->pend = p;
                cell->pend_alloc = want;
        }
        memcpy(cell->pend + cell->pend_len, text, len);
        cell->pend_len += len;
        cell->pend[cell->pend_len] = '\0';
        return 0;
}

static void cell_clear(ExecCell *cell) {
        json_array_clear(cell->outputs);
        json_array_clear(cell->display_ids);
        free(cell->pend_name);
        cell->pend_name = NULL;
        cell->pend_len = 0;
        cell->clear_on_next = false;
        /* What is kept is bounded, not what went by: a progress bar that
         * clears its output may print forever. After the marker, nothing more. */
        if (!cell->truncated)
                cell->bytes = 0;
}

/* Size of a MIME bundle's values: strings count their bytes, other JSON its compact text. */
static size_t bundle_size(const json_t *data) {
        const char *key;
        json_t *v;
        size_t n = 0;

        json_object_foreach((json_t *) data, key, v) {
                if (json_is_string(v))
                        n += json_string_length(v);
                else
                        n += json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
        }
        return n;
}

static void cell_emit(ExecCell *cell, const json_t *output) {
        if (cell->sink.on_output)
                cell->sink.on_output(cell->userdata, output);
}

/* A note of ours on stderr, kept and streamed whatever the limit. */
void cell_note(ExecCell *cell, const char *text) {
        json_auto_t *o = NULL;

        (void) cell_pend_stream(cell, "stderr", text, strlen(text));
        o = json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", "stderr", "text", text);
        if (o)
                cell_emit(cell, o);
}

/* The limit was reached: the marker once, then nothing. */
static void cell_truncate(ExecCell *cell) {
        char text[128];

        if (cell->truncated)
                return;
        cell->truncated = true;
        snprintf(text, sizeof text, "\n[output truncated: limit of %zu bytes reached]\n", cell->opt.output_limit);
        cell_note(cell, text);
}

/* At the end of a cell: what of its stream text never reached the daemon (the kernel's count of what the cell
 * wrote against what came), and how much was not kept; exact only where nothing but stream text can be missing
 * from the count (see ExecOptions.output_limit). */
void cell_summarize(ExecCell *cell) {
        bool counted = cell->written_known && cell->written >= cell->streamed;
        size_t lost = counted ? cell->written - cell->streamed : 0;
        bool exact = counted && cell->cut_other == 0 && (lost == 0 || (!cell->saw_other && !cell->drop_marked));
        char text[256];

        if (lost > 0) {
                snprintf(
                        text, sizeof text,
                        "%s[output dropped: the kernel wrote %zu bytes to stdout and stderr, only %zu of them reached "
                        "kernelsupd]\n",
                        cell->truncated ? "" : "\n", cell->written, cell->streamed);
                cell_note(cell, text);
        }
        if (!cell->truncated)
                return;
        /* Not kept: what came past the limit, and what never came. */
        cell->cut += lost;
        snprintf(text, sizeof text, "[output truncated: %s%zu more bytes not kept]\n", exact ? "" : "at least ",
                 cell->cut);
        cell_note(cell, text);
}

/* Room for n more bytes of text? */
static size_t cell_room(const ExecCell *cell) {
        return cell->bytes >= cell->opt.output_limit ? 0 : cell->opt.output_limit - cell->bytes;
}

/* The longest prefix of text no longer than max that does not cut a UTF-8 sequence. */
static size_t utf8_prefix(const char *text, size_t len, size_t max) {
        size_t n = len < max ? len : max;

        if (n == len)
                return n;
        while (n > 0 && ((unsigned char) text[n] & 0xC0) == 0x80)
                n--;
        return n;
}

void cell_on_stream(ExecCell *cell, const json_t *content) {
        const json_t *jtext = json_object_get(content, "text");
        const char *name = json_string_value(json_object_get(content, "name")), *text;
        json_auto_t *o = NULL;
        size_t len, keep;

        if (!name || !json_is_string(jtext))
                return;
        text = json_string_value(jtext);
        len = json_string_length(jtext);
        cell->streamed += len;
        if (cell->truncated) {
                cell->cut += len;
                return;
        }
        if (cell->clear_on_next)
                cell_clear(cell);
        keep = utf8_prefix(text, len, cell_room(cell));
        if (keep > 0) {
                (void) cell_pend_stream(cell, name, text, keep);
                cell->bytes += keep;
                o = json_pack("{s:s, s:s, s:s%}", "output_type", "stream", "name", name, "text", text, keep);
                if (o)
                        cell_emit(cell, o);
        }
        if (keep < len) {
                cell->cut += len - keep;
                cell_truncate(cell);
        }
}

/* display_data, execute_result and update_display_data. */
void cell_on_display(ExecCell *cell, const char *type, const json_t *content) {
        json_t *data = json_object_get(content, "data");
        json_t *metadata = json_object_get(content, "metadata");
        const char *display_id =
                json_string_value(json_object_get(json_object_get(content, "transient"), "display_id"));
        bool is_update = streq(type, "update_display_data");
        json_auto_t *o = NULL, *streamed = NULL;
        size_t size;

        if (!json_is_object(data))
                return;
        cell->saw_other = true;
        size = bundle_size(data) + (is_update ? 0 : OUTPUT_COST);
        if (cell->truncated) {
                cell->cut += size;
                cell->cut_other += size;
                return;
        }
        if (!json_is_object(metadata))
                metadata = NULL;
        if (is_update && !display_id)
                return;
        if (!is_update && cell->clear_on_next)
                cell_clear(cell);
        if (size > cell_room(cell)) {
                cell->cut += size;
                cell->cut_other += size;
                cell_truncate(cell);
                return;
        }
        cell->bytes += size;

        if (streq(type, "execute_result")) {
                json_t *count = json_object_get(content, "execution_count");

                o = json_pack("{s:s, s:O, s:O, s:O}", "output_type", "execute_result", "execution_count",
                              json_is_integer(count) ? count : json_null(), "data", data, "metadata",
                              metadata ?: json_object());
                if (json_is_integer(count))
                        cell->execution_count = json_integer_value(count);
        } else
                o = json_pack("{s:s, s:O, s:o}", "output_type", is_update ? "update_display_data" : "display_data",
                              "data", data, "metadata", metadata ? json_incref(metadata) : json_object());
        if (!o)
                return;

        if (is_update) {
                size_t i;
                json_t *id;

                json_array_foreach(cell->display_ids, i, id) {
                        json_t *out = json_array_get(cell->outputs, i);

                        if (!json_is_string(id) || !streq(json_string_value(id), display_id))
                                continue;
                        (void) json_object_set(out, "data", json_object_get(o, "data"));
                        (void) json_object_set(out, "metadata", json_object_get(o, "metadata"));
                }
        } else {
                if (cell_flush_stream(cell) < 0 || cell_append(cell, json_incref(o), display_id) < 0)
                        return;
        }

        if (display_id) {
                streamed = json_deep_copy(o);
                if (!streamed ||
                    json_object_set_new(streamed, "transient", json_pack("{s:s}", "display_id", display_id)) < 0)
                        return;
                cell_emit(cell, streamed);
        } else
                cell_emit(cell, o);
}

static size_t error_size(const json_t *content) {
        const json_t *tb = json_object_get(content, "traceback"), *line;
        size_t i, n = json_string_length(json_object_get(content, "ename")) +
                      json_string_length(json_object_get(content, "evalue"));

        json_array_foreach(tb, i, line) {
                n += json_string_length(line);
        }
        return n;
}

/* A new reference to v when it is a string (kept whole, NUL included), else to "". */
static json_t *string_or_empty(const json_t *v) {
        return json_is_string(v) ? json_incref((json_t *) v) : json_string("");
}

void cell_on_error(ExecCell *cell, const json_t *content) {
        const json_t *tb = json_object_get(content, "traceback");
        json_auto_t *o = NULL;
        size_t size = error_size(content) + OUTPUT_COST;

        cell->saw_other = true;
        if (cell->clear_on_next)
                cell_clear(cell);
        if (cell->truncated || size > cell_room(cell)) {
                /* The first error is the cell's outcome: kept past the limit, once. */
                if (cell->error_kept_after_limit)
                        return;
                cell->error_kept_after_limit = true;
                cell_truncate(cell);
        } else
                cell->bytes += size;

        o = json_pack("{s:s, s:o, s:o, s:o}", "output_type", "error", "ename",
                      string_or_empty(json_object_get(content, "ename")), "evalue",
                      string_or_empty(json_object_get(content, "evalue")), "traceback",
                      json_is_array(tb) ? json_incref((json_t *) tb) : json_array());
        if (!o)
                return;
        if (cell_flush_stream(cell) < 0 || cell_append(cell, json_incref(o), NULL) < 0)
                return;
        cell_emit(cell, o);
}

void cell_on_clear(ExecCell *cell, const json_t *content) {
        bool wait = json_is_true(json_object_get(content, "wait"));
        json_auto_t *o = NULL;

        if (cell->truncated)
                return;
        if (wait)
                cell->clear_on_next = true;
        else
                cell_clear(cell);
        o = json_pack("{s:s, s:b}", "output_type", "clear_output", "wait", wait);
        if (o)
                cell_emit(cell, o);
}

/* A cell's outputs as text for a reader that is most often a language model: what a terminal would leave of
 * stream text, the best text form of a rich result with a line naming each other form, an error as its cell's
 * frames and "Name: value", all within an output budget that keeps a head and a tail. One renderer for every
 * front end (kernelctl exec's text mode; the HTTP and MCP answers' text later), so they never differ.
 *
 * Pure: no I/O. The text goes out through the CellRenderEmit the caller gives, in valid UTF-8 pieces (the outputs
 * come from jansson, whose strings are UTF-8), each piece marked with the target it belongs to. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum CellRenderTarget {
        CELL_RENDER_OUT, /* stdout streams, results and displays, the budget's marker */
        CELL_RENDER_ERR, /* stderr streams, errors */
        _CELL_RENDER_TARGET_MAX,
} CellRenderTarget;

/* Receives n bytes of text for target (n > 0; not NUL-terminated). Must not call back into the renderer. */
typedef void (*CellRenderEmit)(CellRenderTarget target, const char *s, size_t n, void *userdata);

typedef struct CellRender CellRender;

/* A renderer for one cell. max_output: the budget in bytes of everything emitted (0: none, everything passes);
 * with a budget, the head (the first max_output/2 bytes, up to a character's end) is emitted as it comes and the
 * rest is held in a ring of the remaining bytes until cell_render_finish(). traceback: an error's whole
 * traceback instead of its cell's frames. emit may be NULL (only count). NULL on out of memory. */
CellRender *cell_render_new(size_t max_output, bool traceback, CellRenderEmit emit, void *userdata);
void cell_render_free(CellRender *r);

/* Saves a binary form of a result or display (an image: image/png, image/jpeg, ...; data is its bytes, decoded from
 * base64) for a reader who wants it: 0 with *ret_path (new, the caller's to free) where it is now; -errno when it
 * could not be. */
typedef int (*CellRenderSave)(const char *mime, const void *data, size_t n, char **ret_path, void *userdata);

/* Has each binary form saved by save (NULL: none, the default): its line then names the path,
 * "[image/png 18 KB: /tmp/out/output-1.png]", or why not, "[image/png 18 KB: not saved: No space left on device]".
 * A form that is not valid base64 is not saved: "not saved: not base64". */
void cell_render_set_save(CellRender *r, CellRenderSave save, void *userdata);

/* Renders one output (an nbformat dict: stream, execute_result, display_data, update_display_data, error;
 * clear_output and unknown types give nothing). Stream text is held per stream until its line ends, so a '\r'
 * or an escape sequence split over two messages is seen whole. -ENOMEM (what was rendered so far stays). */
int cell_render_output(CellRender *r, const json_t *output);

/* Ends the cell: the streams' unfinished lines, then, when the budget cut, a marker line naming what was dropped
 * and the tail. *ret_kept and *ret_dropped (each may be NULL) get the bytes emitted and dropped. Returns 1 when
 * something was dropped, 0 when not, -ENOMEM. Call once. */
int cell_render_finish(CellRender *r, size_t *ret_kept, size_t *ret_dropped);

/* The pure parts, for tests. */

/* The text/html s[0..n) as text: tags removed (a block's end as a newline, table cells apart by a tab), script
 * and style dropped, entities decoded, runs of blanks as one. New, NUL-terminated; NULL on out of memory. */
char *cell_render_html_text(const char *s, size_t n);

/* Whether the text/plain s is only a Python repr placeholder, "<IPython.core.display.Markdown object>",
 * "<Figure size 640x480 with 1 Axes>": no more than the name of what the other forms hold. */
bool cell_render_is_placeholder(const char *s, size_t n);

/* Decodes base64 (RFC 4648; whitespace ignored, padding optional) s[0..n) into *ret (new, NUL-terminated, the caller's
 * to free) of *ret_len bytes: 0, -EINVAL (not base64), -ENOMEM. */
int cell_render_base64_decode(const char *s, size_t n, char **ret, size_t *ret_len);

/* Writes "18 KB" (or "512 B", "2.5 MB") for n bytes into buf. Returns buf. */
char *cell_render_format_size(char *buf, size_t size, size_t n);

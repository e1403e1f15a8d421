/* A cell's outputs (nbformat v4 dicts, as the daemon keeps them) in the shape apps already read: the Execution of
 * E2B's and Cloudflare's SDKs (pure). */
#pragma once

#include <jansson.h>
#include <stdbool.h>

/* One display_data or execute_result as a Result: a member per format ("text", "html", "markdown", "svg", "png",
 * "jpeg", "pdf", "latex", "json", "javascript"), the other MIME types under "extra", and main_key (E2B's wire:
 * "is_main_result"; its SDK's objects: "isMainResult") true for an execute_result. New object in *ret; -ENOMEM,
 * -EINVAL for what is not such an output. */
int shape_result(const json_t *output, const char *main_key, json_t **ret);

/* The outputs of a cell as {"logs": {"stdout": [..], "stderr": [..]}, "results": [..], "error": {"name", "value",
 * "traceback": [..]} or null}. outputs NULL: none. New object in *ret; -ENOMEM. */
int shape_execution(const json_t *outputs, json_t **ret);

/* The cell as text for a model, as kernelctl exec prints it (render.h: stdout and stderr interleaved as they came),
 * within max_output bytes (0: no budget), an error's whole traceback with traceback (as exec --traceback): a new
 * string in *ret_text; *ret_kept and *ret_dropped (each may be NULL) the bytes kept and the bytes the budget dropped
 * (0: none). -ENOMEM. */
int shape_text(const json_t *outputs, size_t max_output, bool traceback, char **ret_text, size_t *ret_kept,
               size_t *ret_dropped);

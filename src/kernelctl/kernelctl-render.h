/* kernelctl's rendering of the daemon's replies (decoded by reply.h) for people: the status
 * table, a cell's outputs as a notebook shows them, check's verdict, a reload report. Text from
 * the daemon is sanitized before it reaches the terminal. Everything writes to stdout, problems to
 * stderr; functions returning int return a kernelctl exit code. Not re-entrant: render_output()
 * and render_exec_summary() share the cell being shown. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "reply.h"

/* Whether a context in this state has a kernel that answers. */
bool render_state_is_up(const char *state);

/* The daemon's reply as indented JSON (--json); as one compact line (--stream). */
int render_json(const json_t *j);
void render_json_line(const json_t *j);

/* status: a table like supervisorctl's, and a note under it for contexts on tcp. */
int render_status_table(const ReplyContext *contexts, size_t n);

/* kernels: a table of NAME, LANGUAGE, INTERRUPT (signal or message), PATH and DISPLAY NAME. */
int render_kernels(const ReplyKernels *k);

/* start, stop, restart: "NAME: STATE (pid P, incarnation I)"; name is the context asked for. */
int render_action(const ReplyContext *c, const char *name);

/* "state X: last_error" (c NULL: "state unknown"). New; NULL on out of memory. */
char *render_not_ready(const ReplyContext *c);

/* One output of a cell (an nbformat dict) through the client library's renderer (render.h), to stdout and
 * stderr: stream text as a terminal leaves it, a result's best text form, an error's cell frames; traceback:
 * the whole of an error's. The first output of a cell starts its renderer, with the budget last given to
 * render_output_budget() (0, the default: none). */
void render_output_budget(size_t max_output);
/* --save-images: each image of the cells shown from now on is written to dir (borrowed: it must outlive them) as
 * output-N.png, N the first number free, and its line names the file. NULL: none. */
void render_output_save_images(const char *dir);
void render_output(const json_t *out, bool traceback);
/* Ends the cell being shown: its unfinished lines, and when the budget cut, the marker and the tail.
 * *ret_kept and *ret_dropped (may be NULL) get the bytes shown and dropped; 1 when something was dropped, 0
 * when not (or no cell was shown), -ENOMEM (said on stderr). render_exec_summary() calls it first. */
int render_output_finish(size_t *ret_kept, size_t *ret_dropped);
/* The note on stderr for a cell that called exit() (ReplyExecResult.exit, may be NULL: nothing) in context. */
void render_exit_note(const char *exit, const char *context);
/* Text mode's last line on stdout: "[ok #3]", "[died: kernel now K]", "[aborted]", "[not started: timeout]". */
void render_exec_summary(const ReplyExecResult *res, bool died);

/* check's line: "NAME: ready pid P kernel_id K incarnation I generation G[: verdict]". verdict is
 * "ready", "same" or "replaced"; expect the kernel_id asked about (NULL: none). */
/* One page of history: the journal's state before the first page (first), then each cell. */
void render_history(const ReplyHistory *h, bool first);
void render_check(const char *name, const ReplyCheck *check, const char *verdict, const char *expect);

/* reload, add, remove: "added c", "restarted b (env changed)", ..., "unchanged 12"; what only a
 * restart of the daemon applies goes to stderr. */
void render_report(const ReplyReport *r);

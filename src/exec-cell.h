/* Inside the cell queue: a cell and the shaping of its outputs, shared by
 * exec.c (the queue) and exec-output.c (nbformat outputs, the limit, display
 * updates, clear_output). Not for use outside those two files. */
#pragma once

#include "exec.h"
#include "util.h"

/* What a kept output other than stream text costs beyond its text (the JSON
 * objects holding it), counted against output_limit: a million empty
 * displays must not be a million objects in memory. */
#define OUTPUT_COST 1024

struct ExecCell {
        ExecQueue *q;
        ExecCell *prev, *next; /* in the queue's waiting list */
        bool queued;

        char *code;
        ExecOptions opt;
        ExecSink sink;
        void *userdata;

        json_t *outputs;     /* nbformat v4 dicts, collected */
        json_t *display_ids; /* parallel to outputs: the display_id string or null */
        /* The trailing stream output, merged chunk by chunk outside jansson
         * (which copies a string on every change) until another output comes. */
        char *pend_name;
        char *pend;
        size_t pend_len, pend_alloc;
        bool clear_on_next; /* clear_output(wait=True) */
        size_t bytes;       /* text counted against opt.output_limit */
        bool truncated;
        bool error_kept_after_limit;
        size_t cut;       /* bytes of text that came after the limit */
        bool drop_marked; /* the marker of a dropped message was added */
        usec_t deadline;  /* CLOCK_MONOTONIC: submit + opt.timeout; USEC_INFINITY */

        long long execution_count;
        char *reply_status; /* "ok", "error", "aborted"; NULL until the reply */
        bool timed_out;
        unsigned aborted_retries;
};

void cell_free(ExecCell *cell);
int cell_flush_stream(ExecCell *cell);
void cell_note(ExecCell *cell, const char *text);
void cell_summarize(ExecCell *cell);
void cell_on_stream(ExecCell *cell, const json_t *content);
void cell_on_display(ExecCell *cell, const char *type, const json_t *content);
void cell_on_error(ExecCell *cell, const json_t *content);
void cell_on_clear(ExecCell *cell, const json_t *content);

/* Inside the cell queue: the queue, a cell and the shaping of its outputs,
 * shared by exec.c (the queue), exec-activity.c (what the kernel is busy
 * with, busy/idle), exec-interrupt.c (an interrupt that does not take: kill_after), exec-kernel.c
 * (attach, detach) and exec-output.c (nbformat outputs, the limit, display
 * updates, clear_output). Not for use outside those files. */
#pragma once

#include "exec.h"
#include "util.h"

/* What a kept output other than stream text costs beyond its text (the JSON
 * objects holding it), counted against output_limit: a million empty
 * displays must not be a million objects in memory. */
#define OUTPUT_COST 1024

/* How many of our own latest request ids the queue remembers, to tell our
 * requests from other clients' in iopub status messages. */
#define OWN_IDS 8

struct ExecQueue {
        uv_loop_t *loop;
        ExecHooks hooks;
        void *userdata;

        KernelConn *conn; /* NULL when detached */
        char *kernel_id;

        ExecCell *head, *tail; /* waiting, in arrival order */
        size_t n_pending;

        /* The execute_request on the kernel. cell is NULL once the cell was
         * answered (abandoned after its timeout) or cancelled: the slot stays
         * taken until the kernel is done with it, so that two cells never run
         * at once. */
        struct {
                char msg_id[37]; /* "" when the slot is free */
                ExecCell *cell;
                bool got_reply, got_idle;
                bool auto_interrupted; /* by timeout or cancel: at most once */
                bool in_grace;         /* timed out, interrupted, waiting for the reply */
                /* iopub showed its execute_input or an output, or its reply came:
                 * the kernel runs (or ran) it, so only now may it be interrupted. */
                bool started;
                /* Answered EXEC_NOT_STARTED (or cancelled) before it started and
                 * withdrawn with an abort_request: should it start all the same,
                 * it is interrupted at once. */
                bool withdrawn;
                /* A kernel_info_request sent behind the request: its reply
                 * says the kernel has left the request ("" when none). */
                char probe_id[37];
                bool probe_replied, probe_idle;
                /* The probe was answered before the request's reply and idle: those are waited for once
                 * more (EXEC_SETTLE_USEC; see run_check). */
                bool probe_waited;
                /* iopub was dropped (bound of the connection): the marker goes
                 * in when the kernel is heard from again, so that a kernel that
                 * died (which drops every connection) gets none. 0: none. */
                size_t drop_pending;
                /* An iopub message came (any parent) since the settle timer started. */
                bool iopub_moved;
                bool saw_input; /* its execute_input came */
                /* The kernel_info_request an interrupt of a kernel that handles shell requests side by side
                 * waits on before its SIGINT goes ("" when none; see run_interrupt in exec.c). */
                char barrier_id[37];
                /* CLOCK_REALTIME of its first interrupt, 0 while none (exec_queue_interrupted_at). */
                usec_t interrupted_at;
                usec_t kill_after; /* its cell's ExecOptions.kill_after, kept should the cell go first */
        } run;

        ExecCell *died; /* was running when the kernel died; answered at the next attach */
        char *died_why;
        bool died_killed; /* died_why is kill_why: its kill_after killed the kernel */
        char *kill_why;   /* why the kernel was killed (kill_after), until it is detached */

        bool iopub_ready;
        /* This kernel finished a cell of ours without an execute_input (tslab publishes none): then its busy
         * with our request as parent is what says it started the request. Cleared by any execute_input. */
        bool no_execute_input;
        char hs_msg_id[37];

        /* What the kernel is busy with, from iopub status messages of every
         * client: the shell request between its busy and its idle ("" when
         * idle). Requests only a control channel takes are left out: they do
         * not hold the shell, and their idle says nothing about it. */
        struct {
                char *msg_id;      /* another client's ids may be long; NULL when idle */
                char msg_type[32]; /* of that request: only execute_request is a cell */
                bool ours;
                unsigned seq; /* +1 at each busy */
                /* A kernel_info_request sent behind another client's request
                 * that our cells wait for: its reply says the kernel left
                 * that request (seq gate_seq), should its idle be lost. */
                char gate_id[37];
                unsigned gate_seq;
        } kernel;
        char own_ids[OWN_IDS][37]; /* our latest requests, a ring */
        unsigned n_own;

        uv_timer_t timer;      /* the running cell's timeout, then its interrupt grace */
        uv_timer_t hs_timer;   /* the iopub handshake's resend */
        uv_timer_t settle;     /* a lone reply or idle, then the probe's idle (EXEC_SETTLE_USEC) */
        uv_timer_t wait_timer; /* the earliest deadline of a queued cell */
        uv_timer_t resend;     /* a cell the kernel aborted unrun goes out again (ABORTED_RESEND_MSEC) */
        uv_timer_t barrier;    /* an interrupt's wait for the barrier's reply (INTERRUPT_BARRIER_MSEC) */
        uv_timer_t kill;       /* the running cell's kill_after, from its first interrupt */
        unsigned n_open_handles;

        bool ending; /* a cell's exit() is ending the kernel (quirks.h): no cell goes to it; cleared at attach */
        bool count_written; /* cells ask for the kernel's count of what they wrote (exec_queue_count_written) */
        bool busy;
        long long execution_count;
        usec_t last_activity;
        ExecCounters counters;
};

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
        size_t streamed;  /* bytes of stream text that came (kept, cleared or cut) */
        size_t cut_other; /* of cut: the outputs other than stream text */
        bool saw_other;   /* an output other than stream text came */
        /* What the cell wrote to stdout and stderr, by the kernel's own count
         * (chunking.h), when written_known. */
        bool written_known;
        size_t written;
        bool drop_marked; /* the marker of a dropped message was added */
        usec_t deadline;  /* CLOCK_MONOTONIC: submit + opt.timeout; USEC_INFINITY */
        usec_t started;   /* CLOCK_MONOTONIC: when it went to the kernel; 0 while it has not */

        long long execution_count;
        char *reply_status; /* "ok", "error", "aborted"; NULL until the reply */
        bool timed_out;
        bool interrupted; /* an interrupt went to the kernel while it ran this cell */
        unsigned aborted_retries;
        int exit_asked; /* quirks_exit_asked() of its reply: 1 the kernel stays, -1 it ends, 0 no exit() */
};

/* While iopub has not delivered anything yet, a kernel_info_request goes out
 * again on each reply and, should one be lost, at this interval. */
#define HANDSHAKE_RESEND_MSEC 250

/* The execute_request slot is taken (a cell of ours is on the kernel, or was and the kernel is not done). */
static inline bool run_taken(const ExecQueue *q) {
        return q->run.msg_id[0] != '\0';
}

/* exec.c */
/* Answers cell (its sink's on_done) and frees it; the queue must no longer hold it. */
void cell_answer(ExecCell *cell, ExecStatus status, const char *kernel_id, const char *message);
/* Starts the next queued cell when the kernel can take it. */
void queue_advance(ExecQueue *q);
void queue_unlink(ExecQueue *q, ExecCell *cell);
/* Forgets the running request: no cell of ours runs, no reply of it is awaited. */
void run_clear(ExecQueue *q);
/* Asks the kernel for its kernel_info, the handshake before the first cell goes out. */
void handshake_send(ExecQueue *q);

/* exec-interrupt.c */
void interrupt_watch_init(ExecQueue *q); /* the kill timer, closed by exec_queue_free */
/* An interrupt of the running request: the first is when status's interrupted_at and its kill_after count from. */
void interrupt_watch(ExecQueue *q);

/* exec-activity.c */
/* Sends a request of ours on the kernel (remembered in own_ids); ret_msg_id (may be NULL) gets its id. */
int queue_send(ExecQueue *q, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]);
void kernel_clear(ExecQueue *q);
void kernel_on_iopub(ExecQueue *q, const char *type, const JupyterMsg *msg);
void kernel_on_reply(ExecQueue *q, const char *parent);
/* The kernel is on another client's shell request. */
bool kernel_busy_other(const ExecQueue *q);
void kernel_gate(ExecQueue *q);
/* The kernel runs an execute_request, ours or another client's. */
bool kernel_runs_cell(const ExecQueue *q);
void queue_update_busy(ExecQueue *q);

/* exec-output.c */
void cell_free(ExecCell *cell);
int cell_flush_stream(ExecCell *cell);
void cell_note(ExecCell *cell, const char *text);
void cell_summarize(ExecCell *cell);
void cell_on_stream(ExecCell *cell, const json_t *content);
void cell_on_display(ExecCell *cell, const char *type, const json_t *content);
void cell_on_error(ExecCell *cell, const json_t *content);
void cell_on_clear(ExecCell *cell, const json_t *content);

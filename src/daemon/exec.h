/* Running cells: one queue per context. Cells run one at a time in arrival
 * order over the context's kept KernelConn; iopub messages are matched to
 * their cell by parent msg_id and turned into nbformat v4 output dicts.
 * The queue also follows the kernel's iopub status for every client (whose
 * request it is busy with, the execution count), so that it hands a cell to
 * the kernel only when the kernel is idle. The queue outlives kernels: when the kernel dies mid-cell, that cell is
 * answered once the context has a new kernel (or gave up), naming it.
 *
 * Callbacks (sink and hooks) never run from inside exec_queue_submit,
 * exec_cell_cancel, exec_cell_interrupt or exec_queue_interrupt, except hooks->interrupt and
 * hooks->send, which the latter two call, and hooks->send and
 * hooks->busy(true) and sink->on_start, which submit calls when the cell starts at once. on_done may run from inside
 * exec_queue_attach, exec_queue_give_up, exec_queue_free, exec_queue_on_reply and exec_queue_on_iopub; from on_done a
 * caller may submit and cancel cells, but must not free the queue. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "jupyter.h"
#include "macro.h"
#include "reply.h"

/* After an interrupt at a cell's timeout, how long the kernel has to answer
 * before the cell is answered EXEC_TIMEOUT without its reply. */
#define EXEC_INTERRUPT_GRACE_USEC (5 * USEC_PER_SEC)
/* When only one of a request's execute_reply and iopub idle came, how long
 * the other has before the queue asks the kernel (kernel_info round trip);
 * and after that round trip, how long the round trip's own iopub idle has. */
#define EXEC_SETTLE_USEC (1 * USEC_PER_SEC)

/* The largest frame the daemon takes from a kernel whose cells keep
 * output_limit bytes: 2 * output_limit + 16 MiB, room for the JSON of a
 * message whose text fits the limit (a newline is 2 bytes in JSON), and for
 * the head of a big print with a small limit. A larger message is dropped
 * whole (see KernelConnCallbacks.on_dropped). */
size_t exec_message_bound(size_t output_limit);

typedef struct ExecQueue ExecQueue;
typedef struct ExecCell ExecCell;

typedef enum ExecStatus {
        EXEC_OK,      /* the cell ran; exit 0 */
        EXEC_ERROR,   /* the cell raised; exit 7 */
        EXEC_TIMEOUT, /* interrupted at its timeout; outputs so far; exit 6 */
        EXEC_DIED,    /* the kernel died while it ran (or before it ran); exit 1 */
        EXEC_ABORTED, /* the queue was shut down (context stopped, daemon exiting); exit 1 */
        /* Its timeout passed before the kernel started it (waiting in our
         * queue, or sent and queued in the kernel behind another client's
         * cell): nothing was interrupted, and it will not run; exit 11. */
        EXEC_NOT_STARTED,
        /* The kernel answered it "aborted" (tslab: "abort"): without running it, each time it was sent (a kernel
         * aborts the cells queued behind one that raised), or after it started (IRkernel answers an interrupted
         * cell so); exit 10. */
        EXEC_KERNEL_ABORTED,
        _EXEC_STATUS_MAX,
} ExecStatus;

/* "ok", "error", "timeout", "died", "aborted", "not_started", "kernel_aborted"; NULL out of range */
const char *exec_status_to_string(ExecStatus s);

typedef struct ExecResult {
        ExecStatus status;
        long long execution_count; /* -1 when unknown */
        const char *kernel_id;     /* the kernel that ran it; for EXEC_DIED the new one, or NULL if none came */
        json_t *outputs;           /* array of nbformat v4 output dicts, borrowed */
        const char *message; /* EXEC_DIED/EXEC_ABORTED/EXEC_TIMEOUT/EXEC_NOT_STARTED/EXEC_KERNEL_ABORTED: a sentence;
                              * else NULL */
        const char *exit;    /* the cell called exit() or quit(): "kept" (the kernel stays, quirks.h) or "ending" (it
                              * is about to end); NULL when it did not */
} ExecResult;

/* The end of a cell as the reply to execute tells it (reply.h); *ret borrows from res. */
void exec_result_reply(const ExecResult *res, ReplyExecResult *ret);

typedef struct ExecSink {
        /* Each output as it arrives (borrowed). May be NULL. These are the
         * nbformat v4 dicts as they come, one per message: stream chunks are
         * not merged; a display_data with a display_id carries
         * "transient": {"display_id": ...}; update_display_data is streamed as
         * {"output_type": "update_display_data", "data", "metadata",
         * "transient"} and clear_output as {"output_type": "clear_output",
         * "wait": bool}. */
        void (*on_output)(void *userdata, const json_t *output);
        /* Exactly once per cell, unless the cell was cancelled. The cell is
         * freed after it returns. In result->outputs consecutive stream chunks
         * of the same name are merged (as a notebook shows them), clear_output
         * and update_display_data are applied, and only nbformat v4 keys are
         * present. */
        void (*on_done)(void *userdata, const ExecResult *result);
        /* The cell went to the kernel kernel_id (borrowed): from exec_queue_submit too, when it starts at
         * once; again should a kernel that aborted it unrun get it anew. May be NULL. */
        void (*on_start)(void *userdata, const char *kernel_id);
} ExecSink;

typedef struct ExecOptions {
        /* USEC_INFINITY: none. Counted from submit: a cell the kernel has
         * not started at its deadline is answered EXEC_NOT_STARTED (see
         * exec_queue_submit); one that started is interrupted, EXEC_TIMEOUT. */
        usec_t timeout;
        /* Bytes of output text kept (and streamed) per cell: stream text and
         * the sizes of the data values, and 1 KiB for each output other than
         * stream text (what it takes in memory beyond its text). Beyond it a marker stream output on
         * stderr, "\n[output truncated: limit of N bytes reached]\n", then
         * nothing, except the first error output (it carries the cell's
         * outcome); when the cell ends, a last stderr output says how much
         * was not kept: "[output truncated: M more bytes not kept]\n", or
         * "[output truncated: at least M more bytes not kept]\n" where M is
         * only what reached the daemon (past the limit) and what is known to
         * be lost: when the kernel gave no count of what the cell wrote (see
         * exec_queue_count_written; a cell that raised gets none), or outputs
         * other than stream text were cut, or some were and messages were
         * lost. When the kernel's count says the cell wrote more to stdout and
         * stderr than came (its iopub socket drops what is queued past its
         * high-water mark for a reader slower than the kernel, and tells
         * nobody), a stderr output before that one says "[output dropped: the
         * kernel wrote W bytes to stdout and stderr, only D of them reached
         * kernelsupd]\n", also in a cell that did not reach its limit.
         * clear_output empties the collected outputs and their count, unless
         * the limit was reached already. */
        size_t output_limit;
        /* 0: none. After an interrupt of the cell (its timeout, a cancel, its client gone, kernelctl interrupt)
         * that has not ended it this long after, the kernel is killed and a new one started (hooks->kill): the
         * cell is answered EXEC_DIED once the new kernel is attached, its message saying so. */
        usec_t kill_after;
} ExecOptions;

/* What the queue needs from its context. */
typedef struct ExecHooks {
        /* Interrupt the running cell: the context signals the kernel's
         * process group with SIGINT. Called for the queue's own cell only
         * once the kernel has started it, or for whatever cell runs on
         * exec_queue_interrupt. For a kernel that handles shell requests side by
         * side (tslab, seen as publishing no execute_input), our cell's interrupt
         * waits for the kernel's reply to a kernel_info_request (or a second): it
         * is called then from exec_queue_on_reply or a timer, and not at all when
         * the cell ended first (see run_interrupt in exec.c). */
        void (*interrupt)(void *userdata);
        /* The kernel became busy with a cell (true: ours or another
         * client's, see exec_queue_busy) or left it (false): the context
         * shows busy. Not called by exec_queue_detach/give_up, which reset
         * the queue to not busy silently: the context changes state then. */
        void (*busy)(void *userdata, bool busy);
        /* Sends a request to the kernel, with kernel_conn_send's contract
         * (content stolen, ret_msg_id filled). NULL: kernel_conn_send on the
         * attached conn. A test drives the queue without a kernel with it. */
        int (*send)(void *userdata, Channel channel, const char *msg_type, json_t *content, char ret_msg_id[37]);
        /* The reply to our request msg_id (borrowed for the call) says its cell called exit() (quirks.h): kept, the
         * kernel stays; else it is about to end, and no cell of ours goes to it until the next attach. May be
         * NULL. */
        void (*exit_asked)(void *userdata, const char *msg_id, bool kept);
        /* How long the kernel has not answered its heartbeat when the context counts it unresponsive, else 0: a cell
         * that could not start says so rather than blame another client. May be NULL (never unresponsive). */
        usec_t (*unresponsive_for)(void *userdata);
        /* Kill the kernel and start a new one: why (a sentence) says a cell did not stop within its kill_after
         * of an interrupt. false when it did not (no kernel, or one being stopped already). May be NULL
         * (kill_after does nothing then). */
        bool (*kill)(void *userdata, const char *why);
} ExecHooks;

int exec_queue_new(uv_loop_t *loop, const ExecHooks *hooks, void *userdata, ExecQueue **ret);
/* Aborts every cell (EXEC_ABORTED) and frees the queue after its timers close. */
void exec_queue_free(ExecQueue *q);

/* Whether the kernel counts what each request writes to stdout and stderr
 * (output chunking's patch, chunking.h): cells sent from now on carry the
 * user expression that asks for the count, and their outputs say exactly how
 * much was not kept and how much never came (ExecOptions.output_limit). The
 * context sets it for each kernel before it attaches it; detach and attach
 * leave it as it is. Off at first. */
void exec_queue_count_written(ExecQueue *q, bool on);

/* The context's kernel answered kernel_info: cells may run on conn (borrowed
 * until detach). A cell that died with the previous kernel is answered now
 * with EXEC_DIED naming kernel_id (copied), then the queue goes on. Before
 * the first cell the queue makes sure iopub delivers (kernel_info_request
 * until an iopub message arrives, as jupyter_client does), so replies and
 * iopub messages of conn must be fed to it from now on. An attach without a
 * detach first counts as a detach ("the kernel was replaced"). */
void exec_queue_attach(ExecQueue *q, KernelConn *conn, const char *kernel_id);
/* The kernel is gone (why: "killed by SIGKILL"). The running cell will be
 * answered EXEC_DIED at the next attach, or at exec_queue_give_up. Queued
 * cells wait for the next kernel. */
void exec_queue_detach(ExecQueue *q, const char *why);
/* The context will not get a kernel soon (stopped, failed): answer the died
 * cell (kernel_id NULL) and every queued cell with EXEC_DIED/EXEC_ABORTED.
 * Detaches first when still attached. The queue stays usable: cells
 * submitted later wait for the next attach. */
void exec_queue_give_up(ExecQueue *q, const char *why);

/* Queues a cell. code is copied. *ret (may be NULL) is valid until on_done
 * runs or exec_cell_cancel is called. Sends it at once when the queue is
 * attached, has nothing of ours on the kernel, and iopub does not show the
 * kernel busy with another client's request (ipykernel serves all clients'
 * shell requests in one queue; a cell sent behind another's waits in it, so
 * the queue waits in its own, where a timeout can take the cell back). A
 * lost idle never blocks it: a kernel_info_request sent behind the other
 * request answers once the kernel has left it. -EINVAL for a missing code or
 * sink->on_done, -ENOMEM, or kernel_conn_send's error when it was to start
 * at once (then nothing was queued and no callback will run).
 *
 * A cell has started once iopub carries its execute_input (or an output, or
 * its reply came). At its deadline a cell not started is answered
 * EXEC_NOT_STARTED and never interrupts anything: a queued one is dropped;
 * one sent but still behind another client's request in the kernel (the
 * other request won the race to the shell) is withdrawn with an
 * abort_request on control (ipykernel then answers it "aborted" without
 * running it), and should the kernel start it all the same (a kernel
 * without abort_request, or an abort that crossed its start) it is
 * interrupted as it starts. */
int exec_queue_submit(ExecQueue *q, const char *code, const ExecOptions *opt, const ExecSink *sink, void *userdata,
                      ExecCell **ret);
/* The client went away: a queued cell is dropped; a cell sent but not
 * started is withdrawn as at a deadline (see exec_queue_submit); a started
 * cell is interrupted (so it never blocks the context; at most one automatic
 * interrupt per cell) and its reply discarded. on_done is not called for it. */
void exec_cell_cancel(ExecCell *cell);

/* Interrupts cell, when it is the one the kernel runs and the kernel has started it (as a cell's timeout
 * does): its on_done follows as the kernel answers. false, and nothing done, for a cell queued, or sent but
 * not started (another client's request ahead of it in the kernel): exec_cell_cancel withdraws those. */
bool exec_cell_interrupt(ExecCell *cell);

/* Interrupts whatever cell the kernel runs: ours (also one answered or
 * cancelled but not yet finished in the kernel), or another client's that
 * iopub shows running. Returns whether there was one. */
bool exec_queue_interrupt(ExecQueue *q);

/* Feed from the context's KernelConn callbacks (every message: the queue
 * picks its own by parent msg_id). */
void exec_queue_on_reply(ExecQueue *q, Channel channel, const JupyterMsg *msg);
void exec_queue_on_iopub(ExecQueue *q, const JupyterMsg *msg);
/* The text of the stderr output a cell gets for each input_request of its code (KernelConnCallbacks'
 * on_input_request: the request was answered with an empty value). */
#define EXEC_NO_INPUT_NOTE "[kernelsup: input() is not available: cells run without stdin]\n"
/* The kernel asked for input (KernelConnCallbacks.on_input_request): the running cell whose request it is gets
 * the note EXEC_NO_INPUT_NOTE, once for each time. */
void exec_queue_on_input_request(ExecQueue *q, const JupyterMsg *msg);
/* The connection of channel was dropped (KernelConnCallbacks.on_dropped;
 * max_message: its bound). For iopub, once the kernel is heard from again
 * (a kernel that died drops every connection and gets no marker), the
 * running cell gets, once, the stderr output "\n[output dropped: a message
 * of more than N bytes from the kernel (or a broken connection); what it
 * sent on iopub meanwhile is lost]\n". For iopub and shell the queue asks
 * the kernel whether it is still running the request (its reply or idle may
 * have been lost); control and hb drops are not the queue's concern.
 *
 * How a request ends: its execute_reply and its iopub idle both came; or a
 * kernel_info_request sent after it (after an interrupt, a dropped
 * connection, or EXEC_SETTLE_USEC with only one of the two) was answered on
 * shell, which handles requests in order, and that request's own idle came
 * on iopub (or EXEC_SETTLE_USEC passed). Those EXEC_SETTLE_USEC start
 * again while iopub still delivers messages (whoever's): a kernel can write
 * faster than the daemon reads, and iopub keeps its order, so what is
 * missing is then behind what arrives. A cell ended without an
 * execute_reply is EXEC_TIMEOUT when it had timed out, else EXEC_ABORTED,
 * and its outputs end with "\n[no reply: the kernel sent no reply to the
 * cell (interrupted after its code finished, or the reply was lost)]\n". */
void exec_queue_on_dropped(ExecQueue *q, Channel channel, size_t max_message);

/* What the queue did since it was made, for metrics (metrics.c); counters only go up. */
#define EXEC_DURATION_BUCKETS 13
/* The upper bounds (seconds) of the cell duration histogram's buckets, ascending; +Inf follows. */
extern const double exec_duration_bounds[EXEC_DURATION_BUCKETS];
typedef struct ExecCounters {
        uint64_t cells[_EXEC_STATUS_MAX]; /* cells answered, by status (a queued cell at its timeout too) */
        uint64_t interrupts; /* interrupts of a running cell: asked for, at its timeout, its client gone */
        uint64_t kills;      /* kernels killed by a cell's kill_after */
        uint64_t output_cut; /* bytes of output text past output_limit, not kept */
        /* Cells that ran, by duration from their start on the kernel to their answer: in the first bucket whose
         * bound holds it (index EXEC_DURATION_BUCKETS: above the last); not cumulative. */
        uint64_t duration[EXEC_DURATION_BUCKETS + 1];
        double duration_sum; /* seconds */
} ExecCounters;
const ExecCounters *exec_queue_counters(const ExecQueue *q); /* borrowed from q */

/* Whether the kernel runs a cell: iopub shows it busy with an
 * execute_request of any client, or ours is on it (sent and not yet known
 * to be finished). */
bool exec_queue_busy(const ExecQueue *q);
/* Whether msg_id is one of the queue's latest requests (its cells, probes and handshakes). */
bool exec_queue_owns(const ExecQueue *q, const char *msg_id);
/* Whose cell the kernel runs: "ours" (sent by this queue), "other" (another
 * client's, as iopub shows), NULL when none (static strings). */
const char *exec_queue_running(const ExecQueue *q);
size_t exec_queue_pending(const ExecQueue *q); /* queued, not counting the running one */
/* CLOCK_REALTIME of the first interrupt of our running cell while the kernel has not left it, else 0: a cell that
 * survives its interrupt shows in status. *ret_kill_at (may be NULL): when its kill_after kills the kernel,
 * 0 when it has none. */
usec_t exec_queue_interrupted_at(const ExecQueue *q, usec_t *ret_kill_at);
/* The kernel's own count: the last execute_input of any client, or a reply
 * to ours; -1 if none. */
long long exec_queue_execution_count(const ExecQueue *q);
usec_t exec_queue_last_activity(const ExecQueue *q); /* CLOCK_REALTIME of the last submit/output/reply; 0 */

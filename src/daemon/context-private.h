/* Inside a context: the state shared by context.c (states, the kernel connection, cells,
 * stop, status), context-launch.c (ports, files, placement and the launch
 * of a kernel, its output to the log), context-exit.c (a kernel's exit, the restart policy),
 * context-lifetime.c (new, adopt, free)
 * and context-heartbeat.c (pings while running). Not for use outside them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "context.h"
#include "exec.h"
#include "journal.h"
#include "jupyter.h"
#include "log.h"
#include "preload.h"
#include "replay.h"
#include "resources.h"
#include "spawn.h"
#include "util.h"

/* How often an unanswered kernel_info_request is sent again while starting:
 * a request sent before the kernel bound its shell port is queued by libzmq
 * and delivered on connect, but one that reached a dying earlier process is
 * lost; and until an iopub message arrives the SUB socket may not be
 * subscribed yet, so a reply alone does not make the kernel ready (each
 * request makes the kernel publish its busy/idle status). */
#define KERNEL_INFO_RESEND_MSEC 250
/* How long a launch waits for the last kernel's leftovers to be gone (killed with SIGKILL: milliseconds). */
#define LEFTOVER_WAIT_USEC (2 * USEC_PER_SEC)

/* How long an IPython kernel has to answer the output chunking request
 * (chunking.h) before its context turns ready without it; a later answer
 * still counts. Running the patch takes milliseconds: only a kernel busy with
 * another client's cell (an adopted one) makes it wait. */
#define CHUNKING_WAIT_USEC (5 * USEC_PER_SEC)

/* Where a kernel is with output chunking. */
typedef enum ChunkingState {
        CHUNKING_UNASKED, /* no kernel_info_reply from this kernel yet */
        CHUNKING_NONE,    /* not an IPython kernel: left alone */
        CHUNKING_WANTED,  /* IPython: patched before it turns ready */
        CHUNKING_PENDING, /* the request is out, its reply not in */
        CHUNKING_ON,
        CHUNKING_OFF, /* output_chunking = no, or the request failed or went unanswered */
} ChunkingState;

/* Cells seen starting on iopub (execute_input) whose end (status idle of the same parent) has not come yet. A kernel
 * runs one at a time; a few more are room for clients whose idle is late. */
#define JOURNAL_PENDING_MAX 4

typedef struct PendingCell {
        char *msg_id; /* the execute_request's (a client's: any length), owned; NULL for a free slot */
        JournalEntry entry;
        bool drop; /* its reply said it called exit(): it ends unjournaled */
        bool held; /* it started during a replay: held (OutsideCell) at its end, to go in at its place */
        size_t at; /* then: the replayed cells whose execute_input came before its own */
} PendingCell;

/* Another client's cell that ran during a replay: it goes into the journal at the place it ran once the replay
 * ends (journal_rewrite_insert), before the journal's cell at. At most OUTSIDE_MAX; past that the journal is
 * incomplete. */
#define OUTSIDE_MAX 64
typedef struct OutsideCell {
        JournalEntry entry;
        size_t at;
} OutsideCell;

/* A replay whose kernel dies during it, or within REPLAY_SURVIVE_USEC after it ended before any cell ran to its
 * end ("right after"), counts toward REPLAY_DEATHS_MAX in a row; then the next kernel starts empty, with a note. */
#define REPLAY_SURVIVE_USEC (10 * USEC_PER_SEC)
#define REPLAY_DEATHS_MAX 2

/* status's transport_note for a kernel on tcp. */
#define TCP_NOTE "any local user can connect to its ports and subscribe to its output"

struct Context {
        const ContextHost *host; /* borrowed */
        ContextConfig *cfg;      /* owned: a copy, so a reload can replace the Config */
        char *name;

        ContextStateKind state;
        bool want_running;
        bool restart_pending; /* stop in progress, then launch at once */

        ContextState st; /* persisted */
        SpawnUser user;  /* resolved at launch */
        bool user_resolved;

        pid_t pid; /* 0 when no process */
        int pidfd;
        uv_poll_t *pid_poll; /* NULL when none; freed in its close callback */
        KernelConn *conn;
        size_t max_message;       /* conn's bound on one frame, from output_limit when it was made */
        ExecQueue *exec;          /* cells, one at a time; outlives kernels */
        bool deadline_hit;        /* the start deadline killed it */
        bool adopting;            /* the process is an earlier daemon's kernel, not launched by us */
        bool got_info, got_iopub; /* while starting: a kernel_info_reply, and any iopub message */
        ChunkingState chunking;   /* of this kernel; reset at each launch and adoption */
        char chunking_id[37];     /* msg_id of the chunking request while its reply is awaited, else "" */
        bool quirks_sent;         /* this kernel was sent what quirks.h says it needs */
        /* The daemon's own silent requests to this kernel (SIGINT, keepkernel_on_exit, output chunking), so that
         * the journal tells them from another client's silent cells; "" when none. */
        char silent_ids[3][37];
        usec_t chunking_sent;     /* CLOCK_MONOTONIC */
        Limits limits;            /* where the kernel's limits come from, its OOM counter */
        SpawnPending release;     /* the forked kernel waiting for its scope before exec; gofd -1 when none */
        char *cold_why;           /* why the current kernel was started cold; NULL when preloaded or unknown */
        PreloadLaunch *pl_answer; /* the launcher's answer awaited (state starting, pid 0); else NULL */
        PreloadLaunch *pl_setup;  /* the preloaded kernel's setup report awaited; else NULL */
        char *pending_error;      /* why the current launch failed, set before its exit */
        char *save_error;         /* why st is not on disk (the last save failed); NULL when it is */
        usec_t save_error_at;     /* when save_error was set (CLOCK_REALTIME) */
        bool conn_saved;          /* st's ports and key are on disk as they are now */
        struct {
                char kernel_id[37];
                uint64_t incarnation;
                unsigned restarts;
        } prev; /* the identity before this launch, taken back when it is not launched */

        uv_timer_t timer;          /* start deadline, backoff, cool-down, stop escalation */
        uv_timer_t info_timer;     /* kernel_info resend while starting; backoff reset while ready */
        uv_timer_t hb_timer;       /* heartbeat pings while running */
        bool hb_outstanding;       /* a ping has not come back yet */
        unsigned hb_missed;        /* consecutive pings that did not come back within an interval */
        uint64_t hb_answers;       /* pings answered, ever */
        usec_t hb_answered_at;     /* CLOCK_MONOTONIC of the last answer, or of the heartbeat's start */
        unsigned dropped_unsaid;   /* channels (1 << Channel) dropped while running, not yet logged: a kernel that
                                    * dies closes them all, so they are said only once it is heard from again */
        usec_t unresponsive_since; /* CLOCK_MONOTONIC */
        int stop_phase;            /* 0: shutdown_request sent, 1: SIGTERM sent, 2: SIGKILL sent */
        bool client_shutdown;      /* stopping because the kernel acknowledged a client's shutdown_request */
        unsigned failures;         /* consecutive ends (failed starts and deaths) for the backoff; 0 after
                                    * backoff_reset of readiness */
        StartLimit limit;
        ContextCounters counters;
        int n_open_handles;
        LeftoverEnd *leftovers; /* the last kernel's leftovers, still being ended; NULL when none */
        bool launch_deferred;   /* a launch waits for them */
        bool stop_deferred;     /* a stop ends (stopped, or the launch of a restart) once they are gone */

        /* restore = replay (context-replay.c) */
        Journal *journal;    /* the current kernel's cells; NULL with restore = none or when it cannot be opened */
        char *journal_error; /* why restore = replay has no journal; NULL otherwise */
        PendingCell pending[JOURNAL_PENDING_MAX];
        Replay replay;          /* the last replay into a kernel of this context (REPLAY_NONE: none since start) */
        bool replay_owed;       /* the kernel launched replaces one lost without being asked */
        bool iopub_dropped;     /* iopub was dropped: when the kernel is heard from again, messages were lost */
        char replay_msg_id[37]; /* the replayed cell's execute_request while its reply is awaited, else "" */
        /* Every execute_request the last replay sent: iopub and shell are separate sockets, so a replayed cell's
         * execute_input may be read after its reply, when replay_msg_id names the next cell; it must not be
         * journaled again. Kept until the next replay begins or the context is freed. */
        char (*replay_sent)[37];
        size_t n_replay_sent;
        char *replay_note;    /* replay_describe(), for status */
        size_t replay_inputs; /* the replayed cells' execute_input seen: where another client's cell ran */
        OutsideCell *outside; /* another client's cells that ended during the replay, in the order they ran */
        size_t n_outside;
        char *last_journaled;   /* the msg_id of the last cell appended, NULL when none */
        usec_t replay_ended;    /* CLOCK_MONOTONIC when the last replay ended, 0 once a cell ran to its end after it */
        unsigned replay_deaths; /* replays in a row whose kernel died during or right after them */
        bool exit_cell;         /* stopping because a cell's exit() ends the kernel (quirks.h) */
};

/* A journal event about c's kernel (log.h): its context, kernel_id, incarnation and pid. */
#define CONTEXT_EVENT(c, id, why, kernel_pid, more)                                                                   \
        (&(LogEvent){ .message_id = (id),                                                                             \
                      .context = (c)->name,                                                                           \
                      .kernel_id = (c)->st.kernel_id,                                                                 \
                      .incarnation = (c)->st.incarnation,                                                             \
                      .reason = (why),                                                                                \
                      .pid = (kernel_pid),                                                                            \
                      .extra = (more) })

/* context.c */
extern const KernelConnCallbacks context_conn_callbacks;
/* The cell queue's hooks (exec.h): interrupt the kernel's process group, busy/idle to the state. */
extern const ExecHooks context_exec_hooks;
void context_set_state(Context *c, ContextStateKind to);
/* Replaces st.last_error with a copy of msg (NULL clears it); not saved. */
void context_set_error(Context *c, const char *msg);
/* A new kernel process (launched or adopted): not answered yet, output chunking not asked yet. */
void context_readiness_reset(Context *c);
/* The output chunking request is still unanswered (CHUNKING_WAIT_USEC passed, or start_timeout): the context
 * turns ready without it. */
void context_chunking_expired(Context *c);
int context_save(Context *c);
void context_send_kernel_info(Context *c);
void context_info_timer_cb(uv_timer_t *t);

/* context-exit.c */
/* Frees the pid_poll handle, the uv_close callback for it. */
void context_pid_poll_close_cb(uv_handle_t *h);
void context_pid_poll_cb(uv_poll_t *p, int status, int events);
void context_launch_failed(Context *c, const char *msg);
/* A launch that cannot succeed before the configuration is read again (a refused kernelspec): failed at once with
 * msg as last_error, no retry. */
void context_launch_refused(Context *c, const char *msg);
/* How a kernel's exit counts (the deaths metric, status's reason). */
KernelDeath exit_info_death(const ExitInfo *e);

/* context-heartbeat.c */
/* Starts the pings every heartbeat_interval, no ping outstanding and none missed. */
void context_hb_start(Context *c);

/* context-replay.c */
/* Opens the journal (restore = replay), or removes a left one (restore = none). Logs what fails; never fails. */
void context_journal_open(Context *c);
void context_journal_close(Context *c);
/* The settings changed from was (a reload without a restart): opens or closes the journal as restore now says. */
void context_journal_config_changed(Context *c, const ContextConfig *was);
/* A message on iopub of the current kernel: execute_input and the idle status of the same parent journal a cell. */
void context_journal_on_iopub(Context *c, const JupyterMsg *msg);
/* The iopub connection was dropped: messages were lost, so the journal can no longer promise a rebuild. */
void context_journal_on_dropped(Context *c);
/* A kernel was just spawned (its kernel_id set): whether it owes a replay, else a fresh journal. */
void context_replay_launched(Context *c);
/* The kernel answers (output chunking settled): starts the replay it owes, state restoring, and returns true; false
 * when it owes none and may turn ready. context_became_ready() follows when the replay ends. */
bool context_replay_begin(Context *c);
/* A reply on shell: true when it was the replayed cell's (consumed). */
bool context_replay_on_reply(Context *c, const JupyterMsg *msg);
/* The kernel ended while restoring: the cell it ran goes from the journal. */
void context_replay_lost(Context *c, const char *why);
/* The kernel exited (was: the state it was in): counts a replay it did not survive (REPLAY_DEATHS_MAX). */
void context_replay_exited(Context *c, ContextStateKind was);
/* A reply of ours said its cell (msg_id) called exit(): it is not journaled, or taken out again. */
void context_journal_drop(Context *c, const char *msg_id);
/* The kernel connection could not read an iopub message (its header or signature): the journal is incomplete. */
void context_journal_on_unreadable(Context *c);
/* The kernel is being stopped while restoring (the daemon exits): the replay ends, the journal stays as it is. */
void context_replay_abandon(Context *c);
/* The journal and replay members of status. */
void context_replay_reply(const Context *c, ReplyContext *ret);

/* context.c, for context-replay.c */
void context_became_ready(Context *c);

/* context-launch.c */
/* Removes the kernel's private copy of its connection file (it holds the key; only a starting kernel reads it,
 * and each launch writes it anew); with dirs, the context's directories below runtime_dir too (kernels/NAME,
 * ipc/NAME: a removed context). Never follows a link. -errno, and *ret_failed (may be NULL) names the path. */
int context_remove_private_files(Context *c, bool dirs, char **ret_failed);
void context_deadline_cb(uv_timer_t *t);
/* Launches a kernel: at once (cold), or once the preloaded launcher answers, on the loop (the context is
 * starting with no pid meanwhile). */
void context_launch(Context *c);
/* Ends what a launch waits for: the launcher's answer (no kernel follows), or a preloaded kernel's setup report
 * (the kernel, if any, stays). For a stop while starting without a pid, and the context's end. */
void context_launch_cancel(Context *c);
/* The kernel has exited: a preloaded kernel's setup report is read first, so its failed step is what the exit
 * tells (pending_error). */
void context_launch_settle(Context *c);

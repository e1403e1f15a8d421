/* The replies of the control protocol, one C type each: the one description of what kernelsupd
 * answers (as a JSON-RPC result, as the data of an error, or as a notification's params) and of
 * what kernelctl reads. Both ends go through the encoders and decoders below, which are written
 * once, from one table per type in reply.c, so they agree by construction.
 *
 * Which method answers with which type:
 *   status, wait            ReplyStatus (also the data of wait's KS_ERR_TIMEOUT)
 *   check                   ReplyCheck
 *   start, stop, restart    ReplyContext (also the data of start's and restart's KS_ERR_FAILED)
 *   check, start, stop,     ReplyTimedOut: the data of their KS_ERR_TIMEOUT
 *   restart
 *   execute                 a ReplyExecution notification ("execution": the record, queued),
 *                           ReplyOutput notifications ("output"), then ReplyExecResult (the data of
 *                           a KS_ERR_FAILED when the cell did not run to its end: status "died"
 *                           or "aborted"); with detach, ReplyExecution at once
 *   attach                  as execute, from the output numbered from
 *   executions              ReplyExecutions
 *   cancel                  ReplyExecution (as it is after the cancel)
 *   interrupt               ReplyInterrupt
 *   metrics                 ReplyMetrics
 *   kernels                 ReplyKernels
 *   reload, add, remove     ReplyReport
 *   any error               ReplyError: the "error" member of the reply
 *
 * Ownership: the strings and JSON values a struct points to are borrowed. reply_X_encode() reads
 * them and returns a new JSON object in *ret (the caller's, json_decref()); 0, -ENOMEM, or -EINVAL
 * for a value it cannot encode (a required string that is NULL, text that is not UTF-8).
 * reply_X_decode() points them into the JSON value it was given, which must outlive the struct;
 * it allocates only arrays, which reply_X_done() frees (also after a failed decode, and on a
 * zeroed struct). Decoders ignore members they do not know (a newer daemon may add some) and
 * refuse with -EBADMSG a missing member or one of the wrong type or out of range, saying which
 * in *problem (may be NULL); -ENOMEM when an array cannot be allocated. Nothing re-enters.
 *
 * A null in JSON is, in C: NULL for a string, the "none" value named at the member for a number,
 * valid = false for a struct. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "macro.h"

/* What a decoder refused: "contexts[2].limits.memory_max: expected an integer or null". */
typedef struct ReplyProblem {
        char text[256];
} ReplyProblem;

/* The supervisor in "status", "wait" and "check". */
typedef struct ReplySupervisor {
        long long pid;
        const char *version;
        long long generation; /* counts the daemon's starts on this machine's state */
        const char *boot_id;
        usec_t started_at;     /* CLOCK_REALTIME; RFC 3339 with milliseconds in JSON */
        double uptime;         /* seconds, sent to the millisecond */
        long long resumes;     /* freezes of the machine seen */
        usec_t last_resume_at; /* 0: null */
        const char *degraded;  /* why the daemon is degraded (its state is not on disk); NULL: null */
} ReplySupervisor;

/* How the last kernel of a context ended ("last_exit"). */
typedef struct ReplyExit {
        bool valid;         /* false: "last_exit" is null (no kernel ended yet); must stay first */
        long long code;     /* exit code; -1: null (killed by a signal, or unknown) */
        long long signal;   /* "SIGKILL", or the number as a string for a signal without a name; 0: null */
        bool oom;           /* the memory cgroup saw an OOM kill */
        const char *reason; /* "exit-code", "signal", "oom-kill" or "unknown" */
        usec_t at;          /* 0: null */
} ReplyExit;

/* Bits of ReplyLimits.enforced and .not_enforced, in JSON the limits' names. */
enum {
        REPLY_LIMIT_MEMORY = 1 << 0, /* "memory_max" */
        REPLY_LIMIT_CPU = 1 << 1,    /* "cpu_quota" */
        REPLY_LIMIT_TASKS = 1 << 2,  /* "tasks_max" */
};

/* A context's resource limits ("limits"): what was asked, and what holds. */
typedef struct ReplyLimits {
        const char *mechanism;  /* "none", "systemd-scope", "cgroup" or "rlimit" */
        long long memory_max;   /* bytes; 0: null (no limit) */
        long long cpu_quota;    /* percent of one CPU, "50%" in JSON; 0: null */
        long long tasks_max;    /* 0: null */
        unsigned enforced;      /* REPLY_LIMIT_* */
        unsigned not_enforced;  /* REPLY_LIMIT_*: asked for, but nothing enforces it here */
        const char *note;       /* why not, in a sentence; NULL: null */
        const char *group;      /* the kernel's cgroup; NULL: null */
        const char *group_kill; /* how a stop kills the kernel's group: "subreaper", "cgroup.kill", ... */
} ReplyLimits;

/* A context's cell journal ("journal", only with restore = replay; journal.h). */
typedef struct ReplyJournal {
        bool valid;
        long long cells;  /* journaled cells of the current kernel (and those it was rebuilt from) */
        long long bytes;  /* the file's size */
        bool complete;    /* false: a cell was not journaled (journal_max, a failed write): no rebuild is promised */
        const char *note; /* why it is incomplete or missing; NULL: null */
} ReplyJournal;

/* The last replay into one of the context's kernels ("replay", left out when there was none; replay.h). */
typedef struct ReplyReplay {
        bool valid;
        const char *phase;       /* "running", "done", "failed", "timed-out", "lost" or "skipped" */
        const char *from_kernel; /* the lost kernel it rebuilds; NULL: null */
        long long cells;         /* cells to run again */
        long long replayed;      /* cells that ran again */
        long long failed_cell;   /* the journal's cell (1-based) it stopped at; 0: null */
        const char *error;       /* the cell's error, or why it stopped or was skipped; NULL: null */
        const char *text;        /* one line, as kernelctl prints it */
} ReplyReplay;

/* One context's status. */
typedef struct ReplyContext {
        const char *name;
        const char *state;     /* "stopped", "starting", "ready", "busy", "unresponsive", "backoff",
                                * "failed", "stopping" or "restoring" */
        long long pid;         /* 0: null (no kernel running) */
        const char *kernel_id; /* a UUID; NULL: null (never started) */
        long long incarnation; /* kernels started so far, over the daemon's restarts */
        long long restarts;
        usec_t started_at; /* 0: null */
        double uptime;     /* seconds, sent to the millisecond; negative: null */
        const char *connection_file;
        ReplyExit last_exit;
        const char *last_error;    /* NULL: null. Kept once the kernel is ready again: why the last one ended */
        usec_t last_error_at;      /* when last_error was set (CLOCK_REALTIME); 0: left out (none, or unknown) */
        long long execution_count; /* of the kernel's last cell; -1: null */
        usec_t last_activity;      /* of our cells; 0: null */
        long long queued;          /* cells waiting */
        ReplyLimits limits;
        const char *transport;       /* "ipc" or "tcp" */
        const char *transport_note;  /* for tcp: any local user can reach the kernel; NULL: null */
        const char *transport_why;   /* why that transport: auto's reason for the kernel, or set; NULL: left out */
        const char *running;         /* whose cell the kernel runs while busy: "ours" (from exec through the
                                      * daemon) or "other" (another client's); NULL: null */
        usec_t interrupted_at;       /* our running cell was interrupted then and has not ended; 0: left out */
        usec_t kill_at;              /* then its kill_after kills the kernel; 0: left out */
        const char *output_chunking; /* "on" or "off" for a running IPython kernel (chunking.h); NULL: null */
        const char *started;         /* how the running kernel was started: "preloaded" or "cold"; NULL: null */
        const char *start_note;      /* why a running kernel was started cold; NULL: null */
        const char *kernel;          /* the kernelspec's name ("python3" for the built-in one); NULL: null (argv
                                      * alone) */
        const char *cwd;             /* the kernel's working directory as configured; NULL: left out (the user's
                                      * home, or /) */
        const char *language;        /* the kernelspec's language; NULL: null */
        const char *interrupt_mode;  /* how the kernel is interrupted: "signal" or "message"; NULL: null */
        ReplyJournal journal;        /* left out with restore = none */
        ReplyReplay replay;          /* left out when no replay happened since the daemon started */
} ReplyContext;

/* status and wait: the daemon and the contexts asked for. */
typedef struct ReplyStatus {
        ReplySupervisor supervisor;
        ReplyContext *contexts;
        size_t n_contexts;
} ReplyStatus;

/* check: the context answers, and the daemon that says so. */
/* check --expect ID: the running kernel's namespace was rebuilt from ID's by replaying its journal. */
typedef struct ReplyRebuilt {
        bool valid;
        const char *kernel_id; /* the expected (lost) kernel */
        long long cells;       /* cells replayed; -1: null (a replay before this daemon started) */
} ReplyRebuilt;

typedef struct ReplyCheck {
        ReplySupervisor supervisor;
        ReplyContext context;
        ReplyRebuilt rebuilt; /* left out unless so */
} ReplyCheck;

/* The data of a KS_ERR_TIMEOUT of check, start, stop and restart: the context as it was. */
typedef struct ReplyTimedOut {
        ReplyContext context;
} ReplyTimedOut;

/* The params of an "output" notification of execute: one output of the cell as it arrives, an
 * nbformat v4 output dict (Jupyter's schema, passed through: only "output_type" is checked). */
typedef struct ReplyOutput {
        long long seq; /* its number within the execution, from 0 in the order the kernel sent them; -1: left out */
        const json_t *output;
} ReplyOutput;

/* An execution: a cell the daemon accepted (execution.h). */
typedef struct ReplyExecution {
        const char *id; /* a random UUID */
        const char *context;
        const char *kernel_id;     /* NULL (null) before it went to a kernel */
        const char *state;         /* "queued", "running", "ok", "error", "aborted", "timeout", "interrupted",
                                    * "not_started" or "lost" */
        long long execution_count; /* -1: null */
        usec_t submitted_at;
        usec_t started_at;    /* 0: null */
        usec_t ended_at;      /* 0: null */
        long long outputs;    /* how many it had: the next one gets this number */
        bool outputs_dropped; /* the memory bound took them: attach can give none */
} ReplyExecution;

/* executions: the ones the peer may see, oldest first. */
typedef struct ReplyExecutions {
        ReplyExecution *executions;
        size_t n_executions;
} ReplyExecutions;

/* The end of a cell. */
typedef struct ReplyExecResult {
        const char *status;        /* "ok", "error", "timeout", "died", "aborted", "not_started" or
                                    * "kernel_aborted" (the kernel did not run it; message says so) */
        long long execution_count; /* -1: null */
        const char *kernel_id;     /* the kernel it ran on (after "died": its successor); NULL: null */
        const json_t *outputs;     /* every output, an array of nbformat v4 output dicts; NULL encodes as [] */
        const char *message;       /* why a cell did not run to its end, a sentence; NULL: left out */
        const char *exit;          /* "kept" or "ending": the cell called exit() (ExecResult); NULL: left out */
} ReplyExecResult;

typedef struct ReplyInterrupt {
        bool interrupted; /* false: no cell of ours was running */
} ReplyInterrupt;

typedef struct ReplyMetrics {
        const char *content_type; /* the OpenMetrics media type, with its version */
        const char *text;         /* the exposition, ending in "# EOF\n" */
} ReplyMetrics;

/* One installed kernelspec (kernelspec.h). */
typedef struct ReplyKernelspec {
        const char *name;
        const char *display_name;   /* NULL: null */
        const char *language;       /* NULL: null */
        const char *interrupt_mode; /* "signal" or "message" */
        const char *path;           /* its kernel.json */
        const char **argv;
        size_t n_argv;
} ReplyKernelspec;

/* kernels: what a context could name in kernel =, for the caller's user, sorted by name. */
typedef struct ReplyKernels {
        ReplyKernelspec *kernels;
        size_t n_kernels;
        const char **dirs; /* the directories searched, in order */
        size_t n_dirs;
        /* The listing stopped at a limit, and says which ("more than 1000 kernelspecs"): the list is partial.
         * NULL: left out, the list is whole. */
        const char *cut;
} ReplyKernels;

/* A context a reload changes: why it restarts ("reason": "env changed"), or which setting it
 * takes without a restart ("setting": "restart"). */
typedef struct ReplyChange {
        const char *name;
        const char *why;
} ReplyChange;

/* What a reload (also add and remove) did, or would do with dry_run. */
typedef struct ReplyReport {
        const char **added;
        size_t n_added;
        const char **removed;
        size_t n_removed;
        ReplyChange *restarted; /* "reason" */
        size_t n_restarted;
        ReplyChange *updated; /* "setting" */
        size_t n_updated;
        long long unchanged;
        const char **not_applied; /* settings only a restart of the daemon applies, as sentences */
        size_t n_not_applied;
        const char **stopping; /* remove: contexts whose kernel had not exited by the timeout; the
                                * member is left out when empty */
        size_t n_stopping;
} ReplyReport;

/* One journaled cell, as history tells it. */
typedef struct ReplyCell {
        long long index;     /* 1-based, in the journal */
        usec_t at;           /* when it was journaled */
        const char *client;  /* the session of the execute_request (encoded lossily) */
        const char *outcome; /* "ok", "error" or "aborted" */
        const char *code;    /* encoded lossily; cut to a page's bound when truncated */
        bool truncated;
} ReplyCell;

/* history: a page of a context's journal (restore = replay). */
typedef struct ReplyHistory {
        const char *context;
        long long total;  /* cells in the journal */
        bool complete;    /* as status's journal.complete */
        const char *note; /* why it is incomplete or missing; NULL: null */
        long long next;   /* the offset of the next page; -1: null (this is the last) */
        ReplyCell *cells;
        size_t n_cells;
} ReplyHistory;

/* The "error" member of an error reply. */
typedef struct ReplyError {
        long long code;      /* RPC_* or KS_ERR_* of protocol.h, within 32 bits */
        const char *message; /* encoded lossily: bytes that are not UTF-8 become U+FFFD */
        const json_t *data;  /* NULL: left out */
} ReplyError;

#define REPLY_DECLARE(name, Type)                                                                                     \
        int reply_##name##_encode(const Type *v, json_t **ret);                                                       \
        int reply_##name##_decode(const json_t *j, Type *ret, ReplyProblem *problem);                                 \
        void reply_##name##_done(Type *v)

REPLY_DECLARE(status, ReplyStatus);
REPLY_DECLARE(check, ReplyCheck);
REPLY_DECLARE(context, ReplyContext);
REPLY_DECLARE(timed_out, ReplyTimedOut);
REPLY_DECLARE(output, ReplyOutput);
REPLY_DECLARE(exec_result, ReplyExecResult);
REPLY_DECLARE(execution, ReplyExecution);
REPLY_DECLARE(executions, ReplyExecutions);
REPLY_DECLARE(interrupt, ReplyInterrupt);
REPLY_DECLARE(metrics, ReplyMetrics);
REPLY_DECLARE(kernels, ReplyKernels);
REPLY_DECLARE(report, ReplyReport);
REPLY_DECLARE(history, ReplyHistory);
REPLY_DECLARE(error, ReplyError);
REPLY_DECLARE(supervisor, ReplySupervisor);

/* check's verdict on a context that answered, as kernelctl check's exit code and kernelsup-http say it: "ready" (no
 * kernel expected), "same" (the expected kernel answers), "rebuilt" (another, its namespace rebuilt from the
 * expected one's journal) or "replaced" (another, its namespace empty). A static string. */
const char *reply_check_verdict(const ReplyCheck *c, const char *expect);

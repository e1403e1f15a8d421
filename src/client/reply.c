/* The replies of the control protocol (reply.h): one table per type says, member by member,
 * the JSON key, its kind and where the value lives in the C struct. One encoder and one decoder
 * walk the tables, so what the daemon writes and what kernelctl reads cannot drift apart, and
 * the members go out in the order of the table. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "util.h"

typedef enum FieldKind {
        FIELD_STRING,    /* const char * */
        FIELD_INTEGER,   /* long long in [min, max] */
        FIELD_NUMBER,    /* double, finite, >= 0 (a nullable one: negative is null) */
        FIELD_BOOL,      /* bool */
        FIELD_TIME,      /* usec_t as RFC 3339 (a nullable one: 0 is null) */
        FIELD_SIGNAL,    /* long long signal number as "SIGKILL" (a nullable one: 0 is null) */
        FIELD_PERCENT,   /* long long as "50%" (a nullable one: 0 is null) */
        FIELD_LIMIT_SET, /* unsigned REPLY_LIMIT_* bits as an array of names */
        FIELD_STRUCT,    /* a struct of type sub (a nullable one starts with bool valid) */
        FIELD_ARRAY,     /* sub *, with a size_t count at count_offset */
        FIELD_STRINGS,   /* const char **, with a size_t count at count_offset */
        FIELD_OUTPUT,    /* const json_t *: an object with a string "output_type" */
        FIELD_OUTPUTS,   /* const json_t *: an array of such objects */
        FIELD_JSON,      /* const json_t *: any value */
} FieldKind;

enum {
        NULLABLE = 1 << 0, /* null stands for the kind's "none" */
        OPTIONAL = 1 << 1, /* left out when none (or empty); absent decodes as none */
        LOSSY = 1 << 2,    /* FIELD_STRING: bytes that are not UTF-8 go out as U+FFFD (text from anywhere) */
};

typedef struct ReplyType ReplyType;

typedef struct Field {
        const char *key;
        FieldKind kind;
        unsigned flags;
        size_t offset;
        size_t count_offset;  /* FIELD_ARRAY, FIELD_STRINGS */
        const ReplyType *sub; /* FIELD_STRUCT, FIELD_ARRAY */
        long long min, max;   /* FIELD_INTEGER */
        long long none;       /* FIELD_INTEGER: the value null stands for */
} Field;

struct ReplyType {
        const Field *fields;
        size_t n_fields;
        size_t size;
};

/* ---- The tables: the protocol's replies, member by member ---- */

#define F(T, k, kind_, m, ...)                                                                                        \
        { .key = k, .kind = kind_, .offset = offsetof(T, m), __VA_ARGS__ }
#define INT(T, k, m, lo, hi, ...) F(T, k, FIELD_INTEGER, m, .min = lo, .max = hi, __VA_ARGS__)
#define LIST(T, k, kind_, m, n, ...) F(T, k, kind_, m, .count_offset = offsetof(T, n), __VA_ARGS__)
#define TYPE(T, table)                                                                                                \
        { .fields = table, .n_fields = ELEMENTSOF(table), .size = sizeof(T) }

static const Field supervisor_fields[] = {
        INT(ReplySupervisor, "pid", pid, 1, INT32_MAX),
        F(ReplySupervisor, "version", FIELD_STRING, version),
        INT(ReplySupervisor, "generation", generation, 0, INT64_MAX),
        F(ReplySupervisor, "boot_id", FIELD_STRING, boot_id),
        F(ReplySupervisor, "started_at", FIELD_TIME, started_at),
        F(ReplySupervisor, "uptime", FIELD_NUMBER, uptime),
        INT(ReplySupervisor, "resumes", resumes, 0, INT32_MAX),
        F(ReplySupervisor, "last_resume_at", FIELD_TIME, last_resume_at, .flags = NULLABLE),
        F(ReplySupervisor, "degraded", FIELD_STRING, degraded, .flags = NULLABLE),
};
static const ReplyType supervisor_type = TYPE(ReplySupervisor, supervisor_fields);

static const Field exit_fields[] = {
        INT(ReplyExit, "code", code, 0, 255, .flags = NULLABLE, .none = -1),
        F(ReplyExit, "signal", FIELD_SIGNAL, signal, .flags = NULLABLE),
        F(ReplyExit, "oom", FIELD_BOOL, oom),
        F(ReplyExit, "reason", FIELD_STRING, reason),
        F(ReplyExit, "at", FIELD_TIME, at, .flags = NULLABLE),
};
static const ReplyType exit_type = TYPE(ReplyExit, exit_fields);
_Static_assert(offsetof(ReplyExit, valid) == 0, "a nullable struct starts with bool valid");

static const Field limits_fields[] = {
        F(ReplyLimits, "mechanism", FIELD_STRING, mechanism),
        INT(ReplyLimits, "memory_max", memory_max, 1, INT64_MAX, .flags = NULLABLE),
        F(ReplyLimits, "cpu_quota", FIELD_PERCENT, cpu_quota, .flags = NULLABLE),
        INT(ReplyLimits, "tasks_max", tasks_max, 1, INT64_MAX, .flags = NULLABLE),
        F(ReplyLimits, "enforced", FIELD_LIMIT_SET, enforced),
        F(ReplyLimits, "not_enforced", FIELD_LIMIT_SET, not_enforced),
        F(ReplyLimits, "note", FIELD_STRING, note, .flags = NULLABLE),
        F(ReplyLimits, "group", FIELD_STRING, group, .flags = NULLABLE),
        F(ReplyLimits, "group_kill", FIELD_STRING, group_kill),
};
static const ReplyType limits_type = TYPE(ReplyLimits, limits_fields);

static const Field journal_fields[] = {
        INT(ReplyJournal, "cells", cells, 0, INT64_MAX),
        INT(ReplyJournal, "bytes", bytes, 0, INT64_MAX),
        F(ReplyJournal, "complete", FIELD_BOOL, complete),
        F(ReplyJournal, "note", FIELD_STRING, note, .flags = NULLABLE | LOSSY),
};
static const ReplyType journal_type = TYPE(ReplyJournal, journal_fields);
_Static_assert(offsetof(ReplyJournal, valid) == 0, "a nullable struct starts with bool valid");

static const Field replay_fields[] = {
        F(ReplyReplay, "phase", FIELD_STRING, phase),
        F(ReplyReplay, "from_kernel", FIELD_STRING, from_kernel, .flags = NULLABLE),
        INT(ReplyReplay, "cells", cells, 0, INT64_MAX),
        INT(ReplyReplay, "replayed", replayed, 0, INT64_MAX),
        INT(ReplyReplay, "failed_cell", failed_cell, 1, INT64_MAX, .flags = NULLABLE, .none = 0),
        F(ReplyReplay, "error", FIELD_STRING, error, .flags = NULLABLE | LOSSY),
        F(ReplyReplay, "text", FIELD_STRING, text, .flags = LOSSY),
};
static const ReplyType replay_type = TYPE(ReplyReplay, replay_fields);
_Static_assert(offsetof(ReplyReplay, valid) == 0, "a nullable struct starts with bool valid");

static const Field rebuilt_fields[] = {
        F(ReplyRebuilt, "kernel_id", FIELD_STRING, kernel_id),
        INT(ReplyRebuilt, "cells", cells, 0, INT64_MAX, .flags = NULLABLE, .none = -1),
};
static const ReplyType rebuilt_type = TYPE(ReplyRebuilt, rebuilt_fields);
_Static_assert(offsetof(ReplyRebuilt, valid) == 0, "a nullable struct starts with bool valid");

static const Field cell_fields[] = {
        INT(ReplyCell, "index", index, 1, INT64_MAX),
        F(ReplyCell, "at", FIELD_TIME, at),
        F(ReplyCell, "client", FIELD_STRING, client, .flags = LOSSY),
        F(ReplyCell, "outcome", FIELD_STRING, outcome),
        F(ReplyCell, "code", FIELD_STRING, code, .flags = LOSSY),
        F(ReplyCell, "truncated", FIELD_BOOL, truncated),
};
static const ReplyType cell_type = TYPE(ReplyCell, cell_fields);

static const Field history_fields[] = {
        F(ReplyHistory, "context", FIELD_STRING, context),
        INT(ReplyHistory, "total", total, 0, INT64_MAX),
        F(ReplyHistory, "complete", FIELD_BOOL, complete),
        F(ReplyHistory, "note", FIELD_STRING, note, .flags = NULLABLE | LOSSY),
        INT(ReplyHistory, "next", next, 0, INT64_MAX, .flags = NULLABLE, .none = -1),
        LIST(ReplyHistory, "cells", FIELD_ARRAY, cells, n_cells, .sub = &cell_type),
};
static const ReplyType history_type = TYPE(ReplyHistory, history_fields);

static const Field context_fields[] = {
        F(ReplyContext, "name", FIELD_STRING, name),
        F(ReplyContext, "state", FIELD_STRING, state),
        INT(ReplyContext, "pid", pid, 1, INT32_MAX, .flags = NULLABLE),
        F(ReplyContext, "kernel_id", FIELD_STRING, kernel_id, .flags = NULLABLE),
        INT(ReplyContext, "incarnation", incarnation, 0, INT64_MAX),
        INT(ReplyContext, "restarts", restarts, 0, INT64_MAX),
        F(ReplyContext, "started_at", FIELD_TIME, started_at, .flags = NULLABLE),
        F(ReplyContext, "uptime", FIELD_NUMBER, uptime, .flags = NULLABLE),
        F(ReplyContext, "connection_file", FIELD_STRING, connection_file),
        F(ReplyContext, "last_exit", FIELD_STRUCT, last_exit, .sub = &exit_type, .flags = NULLABLE),
        F(ReplyContext, "last_error", FIELD_STRING, last_error, .flags = NULLABLE),
        F(ReplyContext, "last_error_at", FIELD_TIME, last_error_at, .flags = OPTIONAL),
        INT(ReplyContext, "execution_count", execution_count, 0, INT64_MAX, .flags = NULLABLE, .none = -1),
        F(ReplyContext, "last_activity", FIELD_TIME, last_activity, .flags = NULLABLE),
        INT(ReplyContext, "queued", queued, 0, INT32_MAX),
        F(ReplyContext, "limits", FIELD_STRUCT, limits, .sub = &limits_type),
        F(ReplyContext, "transport", FIELD_STRING, transport),
        F(ReplyContext, "transport_note", FIELD_STRING, transport_note, .flags = NULLABLE),
        F(ReplyContext, "transport_why", FIELD_STRING, transport_why, .flags = OPTIONAL),
        F(ReplyContext, "running", FIELD_STRING, running, .flags = NULLABLE),
        F(ReplyContext, "interrupted_at", FIELD_TIME, interrupted_at, .flags = OPTIONAL),
        F(ReplyContext, "kill_at", FIELD_TIME, kill_at, .flags = OPTIONAL),
        F(ReplyContext, "output_chunking", FIELD_STRING, output_chunking, .flags = NULLABLE),
        F(ReplyContext, "started", FIELD_STRING, started, .flags = NULLABLE),
        F(ReplyContext, "start_note", FIELD_STRING, start_note, .flags = NULLABLE),
        F(ReplyContext, "kernel", FIELD_STRING, kernel, .flags = NULLABLE),
        F(ReplyContext, "cwd", FIELD_STRING, cwd, .flags = OPTIONAL),
        F(ReplyContext, "language", FIELD_STRING, language, .flags = NULLABLE | LOSSY),
        F(ReplyContext, "interrupt_mode", FIELD_STRING, interrupt_mode, .flags = NULLABLE),
        F(ReplyContext, "journal", FIELD_STRUCT, journal, .sub = &journal_type, .flags = OPTIONAL),
        F(ReplyContext, "replay", FIELD_STRUCT, replay, .sub = &replay_type, .flags = OPTIONAL),
};
static const ReplyType context_type = TYPE(ReplyContext, context_fields);

static const Field status_fields[] = {
        F(ReplyStatus, "supervisor", FIELD_STRUCT, supervisor, .sub = &supervisor_type),
        LIST(ReplyStatus, "contexts", FIELD_ARRAY, contexts, n_contexts, .sub = &context_type),
};
static const ReplyType status_type = TYPE(ReplyStatus, status_fields);

static const Field check_fields[] = {
        F(ReplyCheck, "supervisor", FIELD_STRUCT, supervisor, .sub = &supervisor_type),
        F(ReplyCheck, "context", FIELD_STRUCT, context, .sub = &context_type),
        F(ReplyCheck, "rebuilt", FIELD_STRUCT, rebuilt, .sub = &rebuilt_type, .flags = OPTIONAL),
};
static const ReplyType check_type = TYPE(ReplyCheck, check_fields);

static const Field timed_out_fields[] = {
        F(ReplyTimedOut, "context", FIELD_STRUCT, context, .sub = &context_type),
};
static const ReplyType timed_out_type = TYPE(ReplyTimedOut, timed_out_fields);

static const Field output_fields[] = {
        INT(ReplyOutput, "seq", seq, 0, INT64_MAX, .flags = OPTIONAL, .none = -1),
        F(ReplyOutput, "output", FIELD_OUTPUT, output),
};
static const ReplyType output_type = TYPE(ReplyOutput, output_fields);

static const Field execution_fields[] = {
        F(ReplyExecution, "id", FIELD_STRING, id),
        F(ReplyExecution, "context", FIELD_STRING, context),
        F(ReplyExecution, "kernel_id", FIELD_STRING, kernel_id, .flags = NULLABLE),
        F(ReplyExecution, "state", FIELD_STRING, state),
        INT(ReplyExecution, "execution_count", execution_count, 0, INT64_MAX, .flags = NULLABLE, .none = -1),
        F(ReplyExecution, "submitted_at", FIELD_TIME, submitted_at),
        F(ReplyExecution, "started_at", FIELD_TIME, started_at, .flags = NULLABLE),
        F(ReplyExecution, "ended_at", FIELD_TIME, ended_at, .flags = NULLABLE),
        INT(ReplyExecution, "outputs", outputs, 0, INT64_MAX),
        F(ReplyExecution, "outputs_dropped", FIELD_BOOL, outputs_dropped),
};
static const ReplyType execution_type = TYPE(ReplyExecution, execution_fields);

static const Field executions_fields[] = {
        LIST(ReplyExecutions, "executions", FIELD_ARRAY, executions, n_executions, .sub = &execution_type),
};
static const ReplyType executions_type = TYPE(ReplyExecutions, executions_fields);

static const Field exec_result_fields[] = {
        F(ReplyExecResult, "status", FIELD_STRING, status),
        INT(ReplyExecResult, "execution_count", execution_count, 0, INT64_MAX, .flags = NULLABLE, .none = -1),
        F(ReplyExecResult, "kernel_id", FIELD_STRING, kernel_id, .flags = NULLABLE),
        F(ReplyExecResult, "outputs", FIELD_OUTPUTS, outputs),
        F(ReplyExecResult, "message", FIELD_STRING, message, .flags = OPTIONAL | LOSSY),
        F(ReplyExecResult, "exit", FIELD_STRING, exit, .flags = OPTIONAL),
};
static const ReplyType exec_result_type = TYPE(ReplyExecResult, exec_result_fields);

static const Field interrupt_fields[] = {
        F(ReplyInterrupt, "interrupted", FIELD_BOOL, interrupted),
};
static const ReplyType interrupt_type = TYPE(ReplyInterrupt, interrupt_fields);

static const Field metrics_fields[] = {
        F(ReplyMetrics, "content_type", FIELD_STRING, content_type),
        F(ReplyMetrics, "text", FIELD_STRING, text),
};
static const ReplyType metrics_type = TYPE(ReplyMetrics, metrics_fields);

static const Field kernelspec_fields[] = {
        F(ReplyKernelspec, "name", FIELD_STRING, name),
        F(ReplyKernelspec, "display_name", FIELD_STRING, display_name, .flags = NULLABLE | LOSSY),
        F(ReplyKernelspec, "language", FIELD_STRING, language, .flags = NULLABLE | LOSSY),
        F(ReplyKernelspec, "interrupt_mode", FIELD_STRING, interrupt_mode),
        F(ReplyKernelspec, "path", FIELD_STRING, path, .flags = LOSSY),
        LIST(ReplyKernelspec, "argv", FIELD_STRINGS, argv, n_argv),
};
static const ReplyType kernelspec_type = TYPE(ReplyKernelspec, kernelspec_fields);

static const Field kernels_fields[] = {
        LIST(ReplyKernels, "kernels", FIELD_ARRAY, kernels, n_kernels, .sub = &kernelspec_type),
        LIST(ReplyKernels, "dirs", FIELD_STRINGS, dirs, n_dirs),
        F(ReplyKernels, "cut", FIELD_STRING, cut, .flags = OPTIONAL | LOSSY),
};
static const ReplyType kernels_type = TYPE(ReplyKernels, kernels_fields);

static const Field restarted_fields[] = {
        F(ReplyChange, "name", FIELD_STRING, name),
        F(ReplyChange, "reason", FIELD_STRING, why),
};
static const ReplyType restarted_type = TYPE(ReplyChange, restarted_fields);

static const Field updated_fields[] = {
        F(ReplyChange, "name", FIELD_STRING, name),
        F(ReplyChange, "setting", FIELD_STRING, why),
};
static const ReplyType updated_type = TYPE(ReplyChange, updated_fields);

static const Field report_fields[] = {
        LIST(ReplyReport, "added", FIELD_STRINGS, added, n_added),
        LIST(ReplyReport, "removed", FIELD_STRINGS, removed, n_removed),
        LIST(ReplyReport, "restarted", FIELD_ARRAY, restarted, n_restarted, .sub = &restarted_type),
        LIST(ReplyReport, "updated", FIELD_ARRAY, updated, n_updated, .sub = &updated_type),
        INT(ReplyReport, "unchanged", unchanged, 0, INT64_MAX),
        LIST(ReplyReport, "not_applied", FIELD_STRINGS, not_applied, n_not_applied),
        LIST(ReplyReport, "stopping", FIELD_STRINGS, stopping, n_stopping, .flags = OPTIONAL),
};
static const ReplyType report_type = TYPE(ReplyReport, report_fields);

static const Field error_fields[] = {
        INT(ReplyError, "code", code, INT32_MIN, INT32_MAX),
        F(ReplyError, "message", FIELD_STRING, message, .flags = LOSSY),
        F(ReplyError, "data", FIELD_JSON, data, .flags = OPTIONAL),
};
static const ReplyType error_type = TYPE(ReplyError, error_fields);

/* ---- Values by kind ---- */

static const struct {
        unsigned bit;
        const char *name;
} limit_names[] = {
        { REPLY_LIMIT_MEMORY, "memory_max" },
        { REPLY_LIMIT_CPU, "cpu_quota" },
        { REPLY_LIMIT_TASKS, "tasks_max" },
};

#define AT(base, f, T) ((T *) ((char *) (base) + (f)->offset))
#define COUNT(base, f) (*(size_t *) ((char *) (base) + (f)->count_offset))

/* Whether the member holds its kind's "none" (null, or left out). */
static bool field_is_none(const Field *f, const void *v) {
        switch (f->kind) {
        case FIELD_STRING:
        case FIELD_OUTPUT:
        case FIELD_OUTPUTS:
        case FIELD_JSON:
                return !*AT(v, f, const void *);
        case FIELD_INTEGER:
                return *AT(v, f, long long) == f->none;
        case FIELD_NUMBER:
                return *AT(v, f, double) < 0;
        case FIELD_TIME:
                return *AT(v, f, usec_t) == 0;
        case FIELD_SIGNAL:
        case FIELD_PERCENT:
                return *AT(v, f, long long) == 0;
        case FIELD_STRUCT:
                return !*AT(v, f, bool);
        case FIELD_ARRAY:
        case FIELD_STRINGS:
                return COUNT(v, f) == 0;
        default:
                return false;
        }
}

/* ---- Encoding ---- */

static int encode_struct(const ReplyType *t, const void *v, json_t **ret);

static json_t *signal_json(long long sig) {
        const char *abbrev = sig > 0 && sig < NSIG ? sigabbrev_np((int) sig) : NULL;
        char buf[32];

        if (abbrev)
                snprintf(buf, sizeof buf, "SIG%s", abbrev);
        else
                snprintf(buf, sizeof buf, "%lld", sig);
        return json_string(buf);
}

static json_t *limit_set_json(unsigned bits) {
        json_auto_t *a = json_array();

        if (!a)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(limit_names); i++)
                if ((bits & limit_names[i].bit) && json_array_append_new(a, json_string(limit_names[i].name)) < 0)
                        return NULL;
        return TAKE_PTR(a);
}

static int encode_list(const Field *f, const void *v, json_t **ret) {
        json_auto_t *a = json_array();
        size_t n = COUNT(v, f);
        int r;

        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_t *item = NULL;

                if (f->kind == FIELD_STRINGS) {
                        const char *s = (*AT(v, f, const char **))[i];
                        if (!s || !(item = json_string(s)))
                                return -EINVAL;
                } else {
                        r = encode_struct(f->sub, *AT(v, f, char *) + i * f->sub->size, &item);
                        if (r < 0)
                                return r;
                }
                if (json_array_append_new(a, item) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(a);
        return 0;
}

/* The JSON of one member that is not none: new, or NULL (out of memory, or text that is not UTF-8). */
static json_t *encode_value(const Field *f, const void *v) {
        char buf[64];

        switch (f->kind) {
        case FIELD_STRING:
                if (f->flags & LOSSY)
                        return json_string_lossy(*AT(v, f, const char *));
                return json_string(*AT(v, f, const char *));
        case FIELD_INTEGER:
                return json_integer(*AT(v, f, long long));
        case FIELD_NUMBER:
                /* Seconds to the millisecond: more digits tell nothing and read as noise. */
                return json_real(round(*AT(v, f, double) * 1000) / 1000);
        case FIELD_BOOL:
                return json_boolean(*AT(v, f, bool));
        case FIELD_TIME:
                return json_string(format_timestamp(buf, sizeof buf, *AT(v, f, usec_t)));
        case FIELD_SIGNAL:
                return signal_json(*AT(v, f, long long));
        case FIELD_PERCENT:
                snprintf(buf, sizeof buf, "%lld%%", *AT(v, f, long long));
                return json_string(buf);
        case FIELD_LIMIT_SET:
                return limit_set_json(*AT(v, f, unsigned));
        case FIELD_OUTPUTS:
                /* A cell that never reached the kernel has no outputs yet. */
                if (!*AT(v, f, const json_t *))
                        return json_array();
                /* fall through */
        case FIELD_OUTPUT:
        case FIELD_JSON:
                /* jansson's API takes non-const values; a reference never modifies it. */
                return json_incref((json_t *) *AT(v, f, const json_t *));
        default:
                return NULL;
        }
}

static int encode_field(const Field *f, const void *v, json_t **ret) {
        if (f->kind == FIELD_STRUCT)
                return encode_struct(f->sub, AT(v, f, char), ret);
        if (f->kind == FIELD_ARRAY || f->kind == FIELD_STRINGS)
                return encode_list(f, v, ret);
        if (field_is_none(f, v) && f->kind == FIELD_STRING && !(f->flags & NULLABLE))
                return -EINVAL;
        /* What the decoder would refuse is not sent. */
        if (f->kind == FIELD_INTEGER && (*AT(v, f, long long) < f->min || *AT(v, f, long long) > f->max))
                return -EINVAL;
        *ret = encode_value(f, v);
        /* jansson refuses text that is not UTF-8 in the same way as a failed allocation. */
        return *ret ? 0 : -EINVAL;
}

static int encode_struct(const ReplyType *t, const void *v, json_t **ret) {
        json_auto_t *o = json_object();
        int r;

        if (!o)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_fields; i++) {
                const Field *f = &t->fields[i];
                json_t *value = NULL;

                if ((f->flags & OPTIONAL) && field_is_none(f, v))
                        continue;
                if ((f->flags & NULLABLE) && field_is_none(f, v))
                        value = json_null();
                else {
                        r = encode_field(f, v, &value);
                        if (r < 0)
                                return r;
                }
                if (json_object_set_new(o, f->key, value) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- Decoding ---- */

/* Where the decoder is ("contexts[2].limits"), for the problem it reports. */
typedef struct Decoder {
        ReplyProblem *problem;
        char path[192];
} Decoder;

/* Appends ".key" or "[i]" to the path; returns the length to go back to. */
static size_t decoder_enter(Decoder *d, const char *key, size_t index) {
        size_t len = strlen(d->path);

        if (key)
                snprintf(d->path + len, sizeof d->path - len, "%s%s", len ? "." : "", key);
        else
                snprintf(d->path + len, sizeof d->path - len, "[%zu]", index);
        return len;
}

static void decoder_leave(Decoder *d, size_t len) {
        d->path[len] = '\0';
}

_printf_(2, 3) static int decoder_fail(Decoder *d, const char *fmt, ...) {
        va_list ap;
        int n;

        if (!d->problem)
                return -EBADMSG;
        n = snprintf(d->problem->text, sizeof d->problem->text, "%s: ", *d->path ? d->path : "reply");
        if (n < 0 || (size_t) n >= sizeof d->problem->text)
                return -EBADMSG;
        va_start(ap, fmt);
        vsnprintf(d->problem->text + n, sizeof d->problem->text - (size_t) n, fmt, ap);
        va_end(ap);
        return -EBADMSG;
}

static int decode_struct(Decoder *d, const ReplyType *t, const json_t *j, void *ret);

static int decode_signal(Decoder *d, const json_t *j, long long *ret) {
        const char *s = json_string_value(j);
        unsigned long long n;

        if (!s)
                return decoder_fail(d, "expected a signal name or null");
        for (int sig = 1; sig < NSIG; sig++) {
                const char *abbrev = sigabbrev_np(sig);
                if (abbrev && strncmp(s, "SIG", 3) == 0 && streq(s + 3, abbrev)) {
                        *ret = sig;
                        return 0;
                }
        }
        /* A signal without a name (a real-time one) goes as its number. */
        if (parse_uint(s, 1, NSIG - 1, &n) < 0)
                return decoder_fail(d, "unknown signal");
        *ret = (long long) n;
        return 0;
}

static int decode_percent(Decoder *d, const json_t *j, long long *ret) {
        _cleanup_free_ char *digits = json_is_string(j) ? strdup(json_string_value(j)) : NULL;
        size_t n = digits ? strlen(digits) : 0;
        unsigned long long v;

        if (!json_is_string(j))
                return decoder_fail(d, "expected a percentage (\"50%%\") or null");
        if (!digits)
                return -ENOMEM;
        if (n < 2 || digits[n - 1] != '%')
                return decoder_fail(d, "expected a percentage (\"50%%\")");
        digits[n - 1] = '\0';
        if (parse_uint(digits, 1, UINT32_MAX, &v) < 0)
                return decoder_fail(d, "expected a percentage from 1%% to %" PRIu32 "%%", UINT32_MAX);
        *ret = (long long) v;
        return 0;
}

static int decode_limit_set(Decoder *d, const json_t *j, unsigned *ret) {
        const json_t *v;
        size_t i;

        if (!json_is_array(j))
                return decoder_fail(d, "expected an array of limit names");
        *ret = 0;
        json_array_foreach(j, i, v) {
                size_t k;
                for (k = 0; k < ELEMENTSOF(limit_names); k++)
                        if (json_is_string(v) && streq(json_string_value(v), limit_names[k].name))
                                break;
                if (k == ELEMENTSOF(limit_names))
                        return decoder_fail(d, "item %zu: expected memory_max, cpu_quota or tasks_max", i);
                *ret |= limit_names[k].bit;
        }
        return 0;
}

static bool output_valid(const json_t *j) {
        return json_is_object(j) && json_is_string(json_object_get(j, "output_type"));
}

static int decode_outputs(Decoder *d, const json_t *j, const json_t **ret) {
        const json_t *v;
        size_t i;

        if (!json_is_array(j))
                return decoder_fail(d, "expected an array of outputs");
        json_array_foreach(j, i, v) {
                if (!output_valid(v))
                        return decoder_fail(d, "item %zu: expected an object with a string output_type", i);
        }
        *ret = j;
        return 0;
}

static int decode_list(Decoder *d, const Field *f, const json_t *j, void *ret) {
        size_t n = json_array_size(j), size = f->kind == FIELD_STRINGS ? sizeof(char *) : f->sub->size;
        char *items;
        int r;

        if (!json_is_array(j))
                return decoder_fail(d,
                                    f->kind == FIELD_STRINGS ? "expected an array of strings" : "expected an array");
        items = calloc(n ?: 1, size);
        if (!items)
                return -ENOMEM;
        /* Stored at once, so that reply_X_done() frees what a failure leaves half done. */
        *AT(ret, f, char *) = items;
        for (size_t i = 0; i < n; i++) {
                const json_t *item = json_array_get(j, i);
                size_t mark = decoder_enter(d, NULL, i);

                if (f->kind == FIELD_STRINGS) {
                        if (!json_is_string(item))
                                return decoder_fail(d, "expected a string");
                        ((const char **) items)[i] = json_string_value(item);
                } else {
                        r = decode_struct(d, f->sub, item, items + i * size);
                        if (r < 0)
                                return r;
                }
                COUNT(ret, f) = i + 1;
                decoder_leave(d, mark);
        }
        return 0;
}

static int decode_integer(Decoder *d, const Field *f, const json_t *j, long long *ret) {
        json_int_t v;

        if (!json_is_integer(j))
                return decoder_fail(d, "expected an integer%s", f->flags & NULLABLE ? " or null" : "");
        v = json_integer_value(j);
        if (v < f->min || v > f->max)
                return decoder_fail(d, "%" JSON_INTEGER_FORMAT " is out of range [%lld, %lld]", v, f->min, f->max);
        *ret = v;
        return 0;
}

static int decode_value(Decoder *d, const Field *f, const json_t *j, void *ret) {
        usec_t t;

        switch (f->kind) {
        case FIELD_STRING:
                if (!json_is_string(j))
                        return decoder_fail(d, "expected a string%s", f->flags & NULLABLE ? " or null" : "");
                *AT(ret, f, const char *) = json_string_value(j);
                return 0;
        case FIELD_INTEGER:
                return decode_integer(d, f, j, AT(ret, f, long long));
        case FIELD_NUMBER:
                if (!json_is_number(j) || !isfinite(json_number_value(j)) || json_number_value(j) < 0)
                        return decoder_fail(d, "expected a number of seconds, at least 0");
                *AT(ret, f, double) = json_number_value(j);
                return 0;
        case FIELD_BOOL:
                if (!json_is_boolean(j))
                        return decoder_fail(d, "expected true or false");
                *AT(ret, f, bool) = json_is_true(j);
                return 0;
        case FIELD_TIME:
                if (!json_is_string(j) || parse_timestamp(json_string_value(j), &t) < 0 ||
                    (t == 0 && (f->flags & NULLABLE)))
                        return decoder_fail(d, "expected a time as 2026-01-31T12:00:00.000Z");
                *AT(ret, f, usec_t) = t;
                return 0;
        case FIELD_SIGNAL:
                return decode_signal(d, j, AT(ret, f, long long));
        case FIELD_PERCENT:
                return decode_percent(d, j, AT(ret, f, long long));
        case FIELD_LIMIT_SET:
                return decode_limit_set(d, j, AT(ret, f, unsigned));
        case FIELD_STRUCT:
                return decode_struct(d, f->sub, j, AT(ret, f, char));
        case FIELD_ARRAY:
        case FIELD_STRINGS:
                return decode_list(d, f, j, ret);
        case FIELD_OUTPUT:
                if (!output_valid(j))
                        return decoder_fail(d, "expected an object with a string output_type");
                *AT(ret, f, const json_t *) = j;
                return 0;
        case FIELD_OUTPUTS:
                return decode_outputs(d, j, AT(ret, f, const json_t *));
        case FIELD_JSON:
                *AT(ret, f, const json_t *) = j;
                return 0;
        default:
                return decoder_fail(d, "cannot be read");
        }
}

/* Sets the member to its kind's none: what null and a left-out member stand for. */
static void field_set_none(const Field *f, void *ret) {
        if (f->kind == FIELD_INTEGER)
                *AT(ret, f, long long) = f->none;
        else if (f->kind == FIELD_NUMBER)
                *AT(ret, f, double) = -1;
        /* Everything else is none when zero, as the struct starts. */
}

static int decode_field(Decoder *d, const Field *f, const json_t *obj, void *ret) {
        const json_t *j = json_object_get(obj, f->key);
        size_t mark = decoder_enter(d, f->key, 0);
        int r = 0;

        if (!j && !(f->flags & OPTIONAL))
                r = decoder_fail(d, "missing");
        else if (!j || (json_is_null(j) && (f->flags & NULLABLE)))
                field_set_none(f, ret);
        else if (f->kind == FIELD_STRUCT && (f->flags & (NULLABLE | OPTIONAL))) {
                /* Such a struct starts with bool valid: it came. */
                r = decode_value(d, f, j, ret);
                *AT(ret, f, bool) = true;
        } else
                r = decode_value(d, f, j, ret);
        if (r >= 0)
                decoder_leave(d, mark);
        return r;
}

static int decode_struct(Decoder *d, const ReplyType *t, const json_t *j, void *ret) {
        int r;

        if (!json_is_object(j))
                return decoder_fail(d, "expected an object");
        for (size_t i = 0; i < t->n_fields; i++) {
                r = decode_field(d, &t->fields[i], j, ret);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Frees the arrays a decode allocated, in v and below. */
static void struct_done(const ReplyType *t, void *v) {
        for (size_t i = 0; i < t->n_fields; i++) {
                const Field *f = &t->fields[i];

                if (f->kind == FIELD_STRUCT)
                        struct_done(f->sub, AT(v, f, char));
                else if (f->kind == FIELD_ARRAY) {
                        char *items = *AT(v, f, char *);
                        for (size_t k = 0; items && k < COUNT(v, f); k++)
                                struct_done(f->sub, items + k * f->sub->size);
                        free(items);
                } else if (f->kind == FIELD_STRINGS)
                        free(*AT(v, f, void *));
        }
}

static int decode_top(const ReplyType *t, const json_t *j, void *ret, ReplyProblem *problem) {
        Decoder d = { .problem = problem };
        int r;

        memset(ret, 0, t->size);
        r = decode_struct(&d, t, j, ret);
        if (r < 0) {
                struct_done(t, ret);
                memset(ret, 0, t->size);
        }
        return r;
}

#define REPLY_DEFINE(name, Type)                                                                                      \
        int reply_##name##_encode(const Type *v, json_t **ret) {                                                      \
                return encode_struct(&name##_type, v, ret);                                                           \
        }                                                                                                             \
        int reply_##name##_decode(const json_t *j, Type *ret, ReplyProblem *problem) {                                \
                return decode_top(&name##_type, j, ret, problem);                                                     \
        }                                                                                                             \
        void reply_##name##_done(Type *v) {                                                                           \
                if (!v)                                                                                               \
                        return;                                                                                       \
                struct_done(&name##_type, v);                                                                         \
                memset(v, 0, sizeof *v);                                                                              \
        }

REPLY_DEFINE(status, ReplyStatus)
REPLY_DEFINE(check, ReplyCheck)
REPLY_DEFINE(context, ReplyContext)
REPLY_DEFINE(timed_out, ReplyTimedOut)
REPLY_DEFINE(output, ReplyOutput)
REPLY_DEFINE(exec_result, ReplyExecResult)
REPLY_DEFINE(execution, ReplyExecution)
REPLY_DEFINE(executions, ReplyExecutions)
REPLY_DEFINE(interrupt, ReplyInterrupt)
REPLY_DEFINE(metrics, ReplyMetrics)
REPLY_DEFINE(kernels, ReplyKernels)
REPLY_DEFINE(report, ReplyReport)
REPLY_DEFINE(history, ReplyHistory)
REPLY_DEFINE(error, ReplyError)
REPLY_DEFINE(supervisor, ReplySupervisor)

const char *reply_check_verdict(const ReplyCheck *c, const char *expect) {
        if (!expect)
                return "ready";
        if (c->context.kernel_id && streq(c->context.kernel_id, expect))
                return "same";
        return c->rebuilt.valid ? "rebuilt" : "replaced";
}

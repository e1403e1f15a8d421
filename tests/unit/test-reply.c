/* Tests for reply.c, the typed replies of the control protocol: the JSON the daemon really sends
 * (captured from a kernelsupd running stub kernels, paths shortened) decodes to the values it holds
 * and encodes back to the same bytes; every type goes struct -> JSON -> struct unchanged; and
 * hostile JSON (wrong types, missing members, values out of range, nested junk) is refused with the
 * member named, never crashes, and leaks nothing (the ASan build checks). */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "tap.h"
#include "util.h"

/* status's result */
static const char STATUS[] =
        "{\"supervisor\":{\"pid\":22068,\"version\":\"0.1.0\",\"generation\":1,\"boot_id\":\"718ac4a5-691e-418"
        "e-ac9e-91e9780044b7\",\"started_at\":\"2026-12-01T03:17:51.155Z\",\"uptime\":0.450,\"resumes\""
        ":0,\"last_resume_at\":null,\"degraded\":null},\"contexts\":[{\"name\":\"a\",\"state\":\"ready\",\"pid\":"
        "22094,\"kernel_id\":\"c2364016-3155-47ed-8348-418e9760036e\",\"incarnation\":1,\"restarts\":0,\"s"
        "tarted_at\":\"2026-12-01T03:17:51.325Z\",\"uptime\":0.280,\"connection_file\":\"/tmp/ks/run/c"
        "onnections/a.json\",\"last_exit\":null,\"last_error\":null,\"execution_count\":null,\"last_activ"
        "ity\":null,\"queued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":null,\"ta"
        "sks_max\":null,\"enforced\":[],\"not_enforced\":[],\"note\":null,\"group\":\"/sys/fs/cgroup/unifie"
        "d/kernelsup-a-22094\",\"group_kill\":\"cgroup.kill\"},\"transport\":\"ipc\",\"transport_note\":null"
        ",\"running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":\"python3\","
        "\"language\":\"python\",\"interrupt_mode\":\"signal\"},{\"name\":\"b\",\"state\":"
        "\"stopped\",\"pid\":null,\"kernel_id\":"
        "null,\"incarnation\""
        ":0,\"restarts\":0,\"started_at\":null,\"uptime\":null,\"connection_file\":\"/tmp/ks/run/connectio"
        "ns/b.json\",\"last_exit\":null,\"last_error\":null,\"execution_count\":null,\"last_activity\":nul"
        "l,\"queued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_max\":104857600,\"cpu_quota\":\"50%\",\"task"
        "s_max\":null,\"enforced\":[],\"not_enforced\":[\"memory_max\",\"cpu_quota\"],\"note\":null,\"group\":"
        "null,\"group_kill\":\"subreaper\"},\"transport\":\"tcp\",\"transport_note\":\"any local user can co"
        "nnect to its ports and subscribe to its "
        "output\",\"running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":"
        "\"python3\",\"language\":\"python\",\"interrupt_mode\":\"signal\"}]}";

/* check's result */
static const char CHECK[] =
        "{\"supervisor\":{\"pid\":22068,\"version\":\"0.1.0\",\"generation\":1,\"boot_id\":\"718ac4a5-691e-418"
        "e-ac9e-91e9780044b7\",\"started_at\":\"2026-12-01T03:17:51.155Z\",\"uptime\":0.454,\"resumes\""
        ":0,\"last_resume_at\":null,\"degraded\":null},\"context\":{\"name\":\"a\",\"state\":\"ready\",\"pid\":22"
        "094,\"kernel_id\":\"c2364016-3155-47ed-8348-418e9760036e\",\"incarnation\":1,\"restarts\":0,\"sta"
        "rted_at\":\"2026-12-01T03:17:51.325Z\",\"uptime\":0.284,\"connection_file\":\"/tmp/ks/run/con"
        "nections/a.json\",\"last_exit\":null,\"last_error\":null,\"execution_count\":null,\"last_activit"
        "y\":null,\"queued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":null,\"task"
        "s_max\":null,\"enforced\":[],\"not_enforced\":[],\"note\":null,\"group\":\"/sys/fs/cgroup/unified/"
        "kernelsup-a-22094\",\"group_kill\":\"cgroup.kill\"},\"transport\":\"ipc\",\"transport_note\":null,\""
        "running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":\"python3\","
        "\"language\":\"python\",\"interrupt_mode\":\"signal\"}}";

/* the data of wait's error "not every context was ready within the timeout" */
static const char WAIT_TIMEOUT[] =
        "{\"supervisor\":{\"pid\":22068,\"version\":\"0.1.0\",\"generation\":1,\"boot_id\":\"718ac4a5-691e-418"
        "e-ac9e-91e9780044b7\",\"started_at\":\"2026-12-01T03:17:51.155Z\",\"uptime\":0.659,\"resumes\""
        ":0,\"last_resume_at\":null,\"degraded\":null},\"contexts\":[{\"name\":\"b\",\"state\":\"stopped\",\"pid"
        "\":null,\"kernel_id\":null,\"incarnation\":0,\"restarts\":0,\"started_at\":null,\"uptime\":null,\"co"
        "nnection_file\":\"/tmp/ks/run/connections/b.json\",\"last_exit\":null,\"last_error\":null,\"exec"
        "ution_count\":null,\"last_activity\":null,\"queued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_m"
        "ax\":104857600,\"cpu_quota\":\"50%\",\"tasks_max\":null,\"enforced\":[],\"not_enforced\":[\"memory_m"
        "ax\",\"cpu_quota\"],\"note\":null,\"group\":null,\"group_kill\":\"subreaper\"},\"transport\":\"tcp\",\"t"
        "ransport_note\":\"any local user can connect to its ports and subscribe to its output\",\"ru"
        "nning\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":\"python3\","
        "\"language\":\"python\",\"interrupt_mode\":\"signal\"}]}";

/* the data of check's error "b: not ready within the timeout (state stopped)" */
static const char CHECK_TIMEOUT[] =
        "{\"context\":{\"name\":\"b\",\"state\":\"stopped\",\"pid\":null,\"kernel_id\":null,\"incarnation\":0,\"re"
        "starts\":0,\"started_at\":null,\"uptime\":null,\"connection_file\":\"/tmp/ks/run/connections/b.j"
        "son\",\"last_exit\":null,\"last_error\":null,\"execution_count\":null,\"last_activity\":null,\"que"
        "ued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_max\":104857600,\"cpu_quota\":\"50%\",\"tasks_max\""
        ":null,\"enforced\":[],\"not_enforced\":[\"memory_max\",\"cpu_quota\"],\"note\":null,\"group\":null,\""
        "group_kill\":\"subreaper\"},\"transport\":\"tcp\",\"transport_note\":\"any local user can connect "
        "to its ports and subscribe to its "
        "output\",\"running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":"
        "\"python3\",\"language\":\"python\",\"interrupt_mode\":\"signal\"}}";

/* start's result */
static const char START[] =
        "{\"name\":\"b\",\"state\":\"ready\",\"pid\":22189,\"kernel_id\":\"62d55e11-2173-4423-ba0e-e8a75f67bbd"
        "9\",\"incarnation\":1,\"restarts\":0,\"started_at\":\"2026-12-01T03:17:52.030Z\",\"uptime\":0.280"
        ",\"connection_file\":\"/tmp/ks/run/connections/b.json\",\"last_exit\":null,\"last_error\":null,\""
        "execution_count\":null,\"last_activity\":null,\"queued\":0,\"limits\":{\"mechanism\":\"cgroup\",\"me"
        "mory_max\":104857600,\"cpu_quota\":\"50%\",\"tasks_max\":null,\"enforced\":[\"memory_max\",\"cpu_quo"
        "ta\"],\"not_enforced\":[],\"note\":null,\"group\":\"/sys/fs/cgroup/unified/kernelsup-b-22189\",\"g"
        "roup_kill\":\"cgroup.kill\"},\"transport\":\"tcp\",\"transport_note\":\"any local user can connect"
        " to its ports and subscribe to its "
        "output\",\"running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":"
        "\"python3\",\"language\":\"python\",\"interrupt_mode\":\"signal\"}";

/* stop's result */
static const char STOP[] =
        "{\"name\":\"b\",\"state\":\"stopped\",\"pid\":null,\"kernel_id\":\"62d55e11-2173-4423-ba0e-e8a75f67bb"
        "d9\",\"incarnation\":1,\"restarts\":0,\"started_at\":null,\"uptime\":null,\"connection_file\":\"/tmp"
        "/ks/run/connections/b.json\",\"last_exit\":{\"code\":0,\"signal\":null,\"oom\":false,\"reason\":\"ex"
        "it-code\",\"at\":\"2026-12-01T03:17:52.313Z\"},\"last_error\":null,\"execution_count\":null,\"last"
        "_activity\":null,\"queued\":0,\"limits\":{\"mechanism\":\"none\",\"memory_max\":104857600,\"cpu_quot"
        "a\":\"50%\",\"tasks_max\":null,\"enforced\":[],\"not_enforced\":[\"memory_max\",\"cpu_quota\"],\"note\""
        ":null,\"group\":null,\"group_kill\":\"subreaper\"},\"transport\":\"tcp\",\"transport_note\":\"any loc"
        "al user can connect to its ports and subscribe to its "
        "output\",\"running\":null,\"output_chunking\":null,\"started\":null,\"start_note\":null,\"kernel\":"
        "\"python3\",\"language\":\"python\",\"interrupt_mode\":\"signal\"}";

/* execute's result */
static const char EXECUTE[] =
        "{\"status\":\"ok\",\"execution_count\":1,\"kernel_id\":\"c2364016-3155-47ed-8348-418e9760036e\",\"o"
        "utputs\":[]}";

/* interrupt's result */
static const char INTERRUPT[] = "{\"interrupted\":false}";

/* add's result */
static const char ADD[] =
        "{\"added\":[\"c\"],\"removed\":[],\"restarted\":[],\"updated\":[],\"unchanged\":2,\"not_applied\":[]}";

/* remove's result */
static const char REMOVE[] =
        "{\"added\":[],\"removed\":[\"c\"],\"restarted\":[],\"updated\":[],\"unchanged\":2,\"not_applied\":[]}";

/* nosuch's error */
static const char NOSUCH[] = "{\"code\":-32001,\"message\":\"no such context: zz\"}";

/* A cell's end with outputs, as ipykernel's come through exec.c (built by hand). */
static const char EXECUTE_ERROR[] =
        "{\"status\":\"error\",\"execution_count\":3,\"kernel_id\":\"k\",\"outputs\":[{\"output_type\":\"stream\","
        "\"name\":\"stdout\",\"text\":\"1\\n\"},{\"output_type\":\"error\",\"ename\":\"ValueError\",\"evalue\":\"x\","
        "\"traceback\":[\"Traceback\"]}]}";

/* A remove whose kernel outlived the timeout, and a reload that restarts and updates (built by hand). */
static const char REPORT_FULL[] =
        "{\"added\":[\"c\"],\"removed\":[\"d\"],\"restarted\":[{\"name\":\"b\",\"reason\":\"env changed\"}],"
        "\"updated\":[{\"name\":\"x\",\"setting\":\"restart\"}],\"unchanged\":12,\"not_applied\":[\"[supervisor] "
        "socket changed\"],\"stopping\":[\"d\"]}";

static const char OUTPUT[] = "{\"output\":{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"hi\\n\"}}";
static const char OUTPUT_SEQ[] =
        "{\"seq\":17,\"output\":{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"hi\\n\"}}";

/* An execution as execute's first notification tells it (queued), and one that ended, in the listing. */
static const char EXECUTION[] =
        "{\"id\":\"0f6e9b3a-5c1d-4e2f-9a8b-7c6d5e4f3a2b\",\"context\":\"a\",\"kernel_id\":null,\"state\":\"queued\","
        "\"execution_count\":null,\"submitted_at\":\"2026-12-01T03:17:51.155Z\",\"started_at\":null,\"ended_at\":null,"
        "\"outputs\":0,\"outputs_dropped\":false}";
static const char EXECUTIONS[] =
        "{\"executions\":[{\"id\":\"0f6e9b3a-5c1d-4e2f-9a8b-7c6d5e4f3a2b\",\"context\":\"a\",\"kernel_id\":"
        "\"c2364016-3155-47ed-8348-418e9760036e\",\"state\":\"ok\",\"execution_count\":4,\"submitted_at\":"
        "\"2026-12-01T03:17:51.155Z\",\"started_at\":\"2026-12-01T03:17:51.155Z\",\"ended_at\":"
        "\"2026-12-01T03:17:51.155Z\",\"outputs\":40,\"outputs_dropped\":true}]}";

#define T_STARTED 1796095071155000ULL /* 2026-12-01T03:17:51.155Z */
#define T_CTX_STARTED 1796095071325000ULL
#define T_EXIT 1796095072313000ULL

static json_t *load(const char *text) {
        json_error_t e;
        json_t *j = json_loads(text, JSON_DECODE_ANY, &e);

        if (!j)
                printf("# fixture does not parse: %s at %d\n", e.text, e.position);
        return j;
}

static char *dump(const json_t *j) {
        return j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | json_real_flags(j)) : NULL;
}

/* ---- What the daemon sends: decode, values, and encode back to the same bytes ---- */

/* The fixture's JSON as jansson writes it, reals as short as they read back (json_real_flags, as the daemon
 * sends them). */
static char *redump(const char *text) {
        json_auto_t *j = load(text);

        return dump(j);
}

#define FIXTURE(kind, Type, json_text, label, ...)                                                                    \
        do {                                                                                                          \
                json_auto_t *in_ = load(json_text), *out_ = NULL;                                                     \
                _cleanup_free_ char *again_ = NULL, *want_ = redump(json_text);                                       \
                ReplyProblem p_ = {};                                                                                 \
                Type v = {};                                                                                          \
                if (!is_int(reply_##kind##_decode(in_, &v, &p_), 0, "%s: decodes", label))                            \
                        diag(p_.text);                                                                                \
                __VA_ARGS__;                                                                                          \
                is_int(reply_##kind##_encode(&v, &out_), 0, "%s: encodes", label);                                    \
                again_ = dump(out_);                                                                                  \
                is_str(again_, want_, "%s: encodes back to the same JSON, member order included", label);             \
                reply_##kind##_done(&v);                                                                              \
        } while (0)

static void test_daemon_fixtures(void) {
        FIXTURE(status, ReplyStatus, STATUS, "status", {
                const ReplySupervisor *s = &v.supervisor;
                const ReplyContext *a = &v.contexts[0], *b = &v.contexts[1];
                ok(s->pid == 22068 && streq(s->version, "0.1.0") && s->generation == 1 &&
                           streq(s->boot_id, "718ac4a5-691e-418e-ac9e-91e9780044b7") && s->started_at == T_STARTED &&
                           s->uptime == 0.450 && s->resumes == 0 && s->last_resume_at == 0 && !s->degraded,
                   "status: the supervisor's values");
                is_int(v.n_contexts, 2, "status: two contexts");
                ok(streq(a->name, "a") && streq(a->state, "ready") && a->pid == 22094 &&
                           streq(a->kernel_id, "c2364016-3155-47ed-8348-418e9760036e") && a->incarnation == 1 &&
                           a->restarts == 0 && a->started_at == T_CTX_STARTED && a->uptime == 0.280 &&
                           streq(a->connection_file, "/tmp/ks/run/connections/a.json") && !a->last_exit.valid &&
                           !a->last_error && a->execution_count == -1 && a->last_activity == 0 && a->queued == 0 &&
                           streq(a->transport, "ipc") && !a->transport_note,
                   "status: a running context's values");
                ok(streq(a->limits.mechanism, "none") && a->limits.memory_max == 0 && a->limits.cpu_quota == 0 &&
                           a->limits.tasks_max == 0 && a->limits.enforced == 0 && a->limits.not_enforced == 0 &&
                           !a->limits.note && streq(a->limits.group, "/sys/fs/cgroup/unified/kernelsup-a-22094") &&
                           streq(a->limits.group_kill, "cgroup.kill"),
                   "status: its limits");
                ok(streq(b->name, "b") && streq(b->state, "stopped") && b->pid == 0 && !b->kernel_id &&
                           b->started_at == 0 && b->uptime < 0 && b->limits.memory_max == 104857600 &&
                           b->limits.cpu_quota == 50 && b->limits.enforced == 0 &&
                           b->limits.not_enforced == (REPLY_LIMIT_MEMORY | REPLY_LIMIT_CPU) && !b->limits.group &&
                           streq(b->transport, "tcp") && b->transport_note && strstr(b->transport_note, "any local"),
                   "status: a stopped context on tcp with limits nothing enforces: nulls are none");
        });
        FIXTURE(check, ReplyCheck, CHECK, "check", {
                ok(v.supervisor.uptime == 0.454 && streq(v.context.name, "a") && v.context.pid == 22094,
                   "check: the supervisor and the context");
        });
        FIXTURE(status, ReplyStatus, WAIT_TIMEOUT, "wait's timeout",
                { ok(v.n_contexts == 1 && streq(v.contexts[0].name, "b"), "wait's timeout: the context not ready"); });
        FIXTURE(timed_out, ReplyTimedOut, CHECK_TIMEOUT, "check's timeout", {
                ok(streq(v.context.name, "b") && streq(v.context.state, "stopped"), "check's timeout: the context");
        });
        FIXTURE(context, ReplyContext, START, "start", {
                ok(v.limits.enforced == (REPLY_LIMIT_MEMORY | REPLY_LIMIT_CPU) && v.limits.not_enforced == 0 &&
                           streq(v.limits.mechanism, "cgroup") && v.uptime == 0.280,
                   "start: limits enforced by the cgroup");
        });
        FIXTURE(context, ReplyContext, STOP, "stop", {
                ok(v.last_exit.valid && v.last_exit.code == 0 && v.last_exit.signal == 0 && !v.last_exit.oom &&
                           streq(v.last_exit.reason, "exit-code") && v.last_exit.at == T_EXIT &&
                           streq(v.kernel_id, "62d55e11-2173-4423-ba0e-e8a75f67bbd9") && v.pid == 0,
                   "stop: how the kernel ended");
        });
        FIXTURE(exec_result, ReplyExecResult, EXECUTE, "execute", {
                ok(streq(v.status, "ok") && v.execution_count == 1 &&
                           streq(v.kernel_id, "c2364016-3155-47ed-8348-418e9760036e") &&
                           json_array_size(v.outputs) == 0,
                   "execute: the cell's end");
        });
        FIXTURE(exec_result, ReplyExecResult, EXECUTE_ERROR, "execute that raised", {
                ok(streq(v.status, "error") && v.execution_count == 3 && json_array_size(v.outputs) == 2,
                   "execute that raised: its outputs");
        });
        FIXTURE(output, ReplyOutput, OUTPUT, "output notification", {
                is_str(json_string_value(json_object_get(v.output, "text")), "hi\n", "output notification: the text");
        });
        FIXTURE(output, ReplyOutput, OUTPUT_SEQ, "numbered output notification",
                { is_int(v.seq, 17, "numbered output notification: its seq"); });
        FIXTURE(execution, ReplyExecution, EXECUTION, "execution record", {
                ok(streq(v.state, "queued") && !v.kernel_id && v.execution_count == -1 && v.started_at == 0 &&
                           v.ended_at == 0 && v.submitted_at == T_STARTED && v.outputs == 0 && !v.outputs_dropped,
                   "execution record: queued, the nulls are none");
        });
        FIXTURE(executions, ReplyExecutions, EXECUTIONS, "executions", {
                ok(v.n_executions == 1 && streq(v.executions[0].state, "ok") && v.executions[0].outputs == 40 &&
                           v.executions[0].outputs_dropped && v.executions[0].execution_count == 4,
                   "executions: an ended one whose outputs were dropped");
        });
        FIXTURE(interrupt, ReplyInterrupt, INTERRUPT, "interrupt", { ok(!v.interrupted, "interrupt: nothing ran"); });
        FIXTURE(report, ReplyReport, ADD, "add", {
                ok(v.n_added == 1 && streq(v.added[0], "c") && v.n_removed == 0 && v.n_restarted == 0 &&
                           v.n_updated == 0 && v.unchanged == 2 && v.n_not_applied == 0 && v.n_stopping == 0,
                   "add: the report");
        });
        FIXTURE(report, ReplyReport, REMOVE, "remove",
                { ok(v.n_removed == 1 && streq(v.removed[0], "c") && !v.stopping, "remove: the report"); });
        FIXTURE(report, ReplyReport, REPORT_FULL, "a full report", {
                ok(v.n_restarted == 1 && streq(v.restarted[0].name, "b") && streq(v.restarted[0].why, "env changed") &&
                           v.n_updated == 1 && streq(v.updated[0].name, "x") && streq(v.updated[0].why, "restart") &&
                           v.unchanged == 12 && v.n_not_applied == 1 && v.n_stopping == 1 && streq(v.stopping[0], "d"),
                   "a full report: every list");
        });
        FIXTURE(error, ReplyError, NOSUCH, "an error", {
                ok(v.code == -32001 && streq(v.message, "no such context: zz") && !v.data,
                   "an error: code and message");
        });
}

/* ---- Every type: struct -> JSON -> struct ---- */

static bool exit_equal(const ReplyExit *a, const ReplyExit *b) {
        return a->valid == b->valid &&
               (!a->valid || (a->code == b->code && a->signal == b->signal && a->oom == b->oom &&
                              streq(a->reason, b->reason) && a->at == b->at));
}

static bool limits_equal(const ReplyLimits *a, const ReplyLimits *b) {
        return streq(a->mechanism, b->mechanism) && a->memory_max == b->memory_max && a->cpu_quota == b->cpu_quota &&
               a->tasks_max == b->tasks_max && a->enforced == b->enforced && a->not_enforced == b->not_enforced &&
               streq_ptr(a->note, b->note) && streq_ptr(a->group, b->group) && streq(a->group_kill, b->group_kill);
}

static bool context_equal(const ReplyContext *a, const ReplyContext *b) {
        return streq(a->name, b->name) && streq(a->state, b->state) && a->pid == b->pid &&
               streq_ptr(a->kernel_id, b->kernel_id) && a->incarnation == b->incarnation &&
               a->restarts == b->restarts && a->started_at == b->started_at &&
               (a->uptime == b->uptime || (a->uptime < 0 && b->uptime < 0)) &&
               streq(a->connection_file, b->connection_file) && exit_equal(&a->last_exit, &b->last_exit) &&
               streq_ptr(a->last_error, b->last_error) && a->execution_count == b->execution_count &&
               a->last_activity == b->last_activity && a->queued == b->queued &&
               limits_equal(&a->limits, &b->limits) && streq(a->transport, b->transport) &&
               streq_ptr(a->transport_note, b->transport_note) && streq_ptr(a->running, b->running) &&
               streq_ptr(a->output_chunking, b->output_chunking) && streq_ptr(a->started, b->started) &&
               streq_ptr(a->start_note, b->start_note) && streq_ptr(a->kernel, b->kernel) &&
               streq_ptr(a->language, b->language) && streq_ptr(a->interrupt_mode, b->interrupt_mode);
}

static bool supervisor_equal(const ReplySupervisor *a, const ReplySupervisor *b) {
        return a->pid == b->pid && streq(a->version, b->version) && a->generation == b->generation &&
               streq(a->boot_id, b->boot_id) && a->started_at == b->started_at && a->uptime == b->uptime &&
               a->resumes == b->resumes && a->last_resume_at == b->last_resume_at &&
               streq_ptr(a->degraded, b->degraded);
}

static bool strings_equal(const char **a, size_t na, const char **b, size_t nb) {
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return true;
}

static bool changes_equal(const ReplyChange *a, size_t na, const ReplyChange *b, size_t nb) {
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (!streq(a[i].name, b[i].name) || !streq(a[i].why, b[i].why))
                        return false;
        return true;
}

static bool report_equal(const ReplyReport *a, const ReplyReport *b) {
        return strings_equal(a->added, a->n_added, b->added, b->n_added) &&
               strings_equal(a->removed, a->n_removed, b->removed, b->n_removed) &&
               changes_equal(a->restarted, a->n_restarted, b->restarted, b->n_restarted) &&
               changes_equal(a->updated, a->n_updated, b->updated, b->n_updated) && a->unchanged == b->unchanged &&
               strings_equal(a->not_applied, a->n_not_applied, b->not_applied, b->n_not_applied) &&
               strings_equal(a->stopping, a->n_stopping, b->stopping, b->n_stopping);
}

/* Every member set, none of them to its "none". */
static const ReplyContext FULL_CONTEXT = {
        .name = "full",
        .state = "busy",
        .pid = 4242,
        .kernel_id = "k-1",
        .incarnation = 7,
        .restarts = 3,
        .started_at = T_STARTED,
        .uptime = 12.5,
        .connection_file = "/c.json",
        .last_exit = { .valid = true, .code = -1, .signal = SIGKILL, .oom = true, .reason = "oom-kill", .at = T_EXIT },
        .last_error = "boom",
        .execution_count = 0,
        .last_activity = T_CTX_STARTED,
        .queued = 2,
        .limits = { .mechanism = "cgroup",
                    .memory_max = 1LL << 40,
                    .cpu_quota = 150,
                    .tasks_max = 64,
                    .enforced = REPLY_LIMIT_MEMORY | REPLY_LIMIT_TASKS,
                    .not_enforced = REPLY_LIMIT_CPU,
                    .note = "n",
                    .group = "/g",
                    .group_kill = "freezer" },
        .transport = "tcp",
        .transport_note = "any local user",
        .running = "other",
        .output_chunking = "off",
        .started = "cold",
        .start_note = "preload = no",
        .kernel = "ir",
        .language = "R",
        .interrupt_mode = "message",
};

/* Every member that can be none, none. */
static const ReplyContext EMPTY_CONTEXT = {
        .name = "empty",
        .state = "stopped",
        .uptime = -1,
        .connection_file = "/e.json",
        .execution_count = -1,
        .limits = { .mechanism = "none", .group_kill = "subreaper" },
        .transport = "ipc",
};

static const ReplySupervisor SUPERVISOR = {
        .pid = 1,
        .version = "0.1.0",
        .generation = 9,
        .boot_id = "b",
        .started_at = T_STARTED,
        .uptime = 0,
        .resumes = 2,
        .last_resume_at = T_EXIT,
        .degraded = "state not saved",
};

/* Encodes in and decodes it into *out, which points into *keep (the caller frees both); whether it went. */
#define ROUND(kind, in, out)                                                                                          \
        ({                                                                                                            \
                ReplyProblem p_ = {};                                                                                 \
                json_t *j_ = NULL;                                                                                    \
                int r_ = reply_##kind##_encode(in, &j_);                                                              \
                if (r_ >= 0)                                                                                          \
                        r_ = reply_##kind##_decode(j_, out, &p_);                                                     \
                if (r_ < 0)                                                                                           \
                        printf("# %s: %s %s\n", #kind, strerror(-r_), p_.text);                                       \
                json_decref(keep);                                                                                    \
                keep = j_;                                                                                            \
                r_ >= 0;                                                                                              \
        })

static void test_round_trips(void) {
        ReplyContext contexts[] = { FULL_CONTEXT, EMPTY_CONTEXT }, c;
        ReplyContext rt_signal = EMPTY_CONTEXT;
        ReplyStatus status = { .supervisor = SUPERVISOR, .contexts = contexts, .n_contexts = 2 }, s;
        ReplyCheck check = { .supervisor = SUPERVISOR, .context = FULL_CONTEXT }, k;
        ReplyTimedOut late = { .context = EMPTY_CONTEXT }, l;
        json_auto_t *out_obj = json_pack("{s:s, s:{s:s}}", "output_type", "display_data", "data", "text/plain", "1");
        json_auto_t *outputs = json_pack("[O]", out_obj);
        ReplyOutput output = { .output = out_obj }, o;
        ReplyExecResult res = { .status = "died", .execution_count = -1, .outputs = outputs }, e;
        ReplyInterrupt intr = { .interrupted = true }, i;
        const char *added[] = { "a", "b" }, *none[] = { NULL }, *stopping[] = { "z" };
        ReplyChange restarted[] = { { "r", "cwd changed" } },
                    updated[] = { { "u", "restart" }, { "v", "stop_timeout" } };
        ReplyReport report = { .added = added,
                               .n_added = 2,
                               .removed = none,
                               .restarted = restarted,
                               .n_restarted = 1,
                               .updated = updated,
                               .n_updated = 2,
                               .unchanged = 0,
                               .not_applied = added,
                               .n_not_applied = 1,
                               .stopping = stopping,
                               .n_stopping = 1 },
                    rep;
        json_auto_t *data = json_pack("{s:i}", "x", 1);
        ReplyError err = { .code = INT32_MIN, .message = "m", .data = data }, er;
        json_auto_t *keep = NULL; /* the JSON the last ROUND() decoded, which its struct points into */

        ok(ROUND(context, &FULL_CONTEXT, &c) && context_equal(&c, &FULL_CONTEXT), "context, every member set");
        reply_context_done(&c);
        ok(ROUND(context, &EMPTY_CONTEXT, &c) && context_equal(&c, &EMPTY_CONTEXT), "context, every member none");
        reply_context_done(&c);
        /* A real-time signal has no name: it goes as its number. */
        rt_signal.last_exit = (ReplyExit){ .valid = true, .code = -1, .signal = SIGRTMIN + 2, .reason = "signal" };
        ok(ROUND(context, &rt_signal, &c) && c.last_exit.signal == SIGRTMIN + 2, "context, a signal without a name");
        reply_context_done(&c);
        ok(ROUND(status, &status, &s) && s.n_contexts == 2 && supervisor_equal(&s.supervisor, &SUPERVISOR) &&
                   context_equal(&s.contexts[0], &FULL_CONTEXT) && context_equal(&s.contexts[1], &EMPTY_CONTEXT),
           "status");
        reply_status_done(&s);
        ok(s.contexts == NULL && s.n_contexts == 0, "done leaves the struct empty");
        status.n_contexts = 0;
        ok(ROUND(status, &status, &s) && s.n_contexts == 0, "status without contexts");
        reply_status_done(&s);
        ok(ROUND(check, &check, &k) && supervisor_equal(&k.supervisor, &SUPERVISOR) &&
                   context_equal(&k.context, &FULL_CONTEXT),
           "check");
        reply_check_done(&k);
        ok(ROUND(timed_out, &late, &l) && context_equal(&l.context, &EMPTY_CONTEXT), "timed out");
        reply_timed_out_done(&l);
        ok(ROUND(output, &output, &o) && json_equal((json_t *) o.output, out_obj), "output");
        reply_output_done(&o);
        ok(ROUND(exec_result, &res, &e) && streq(e.status, "died") && e.execution_count == -1 && !e.kernel_id &&
                   json_equal((json_t *) e.outputs, outputs),
           "exec result, no count and no kernel");
        reply_exec_result_done(&e);
        res = (ReplyExecResult){ .status = "ok", .execution_count = 0, .kernel_id = "k", .outputs = outputs };
        ok(ROUND(exec_result, &res, &e) && e.execution_count == 0 && streq(e.kernel_id, "k"), "exec result, count 0");
        reply_exec_result_done(&e);
        res = (ReplyExecResult){ .status = "aborted", .execution_count = -1 };
        ok(ROUND(exec_result, &res, &e) && json_is_array(e.outputs) && json_array_size(e.outputs) == 0,
           "exec result without outputs: an empty array");
        reply_exec_result_done(&e);
        res = (ReplyExecResult){ .status = "kernel_aborted", .execution_count = -1, .message = "not run" };
        ok(ROUND(exec_result, &res, &e) && streq_ptr(e.message, "not run"), "exec result with its message");
        reply_exec_result_done(&e);
        {
                const char *argv[] = { "/usr/bin/R", "--args", "{kernel_file}" }, *dirs[] = { "/a/kernels", "/b" };
                ReplyKernelspec list[] = {
                        { .name = "ir",
                          .display_name = "R",
                          .language = "R",
                          .interrupt_mode = "signal",
                          .path = "/a/kernels/ir/kernel.json",
                          .argv = argv,
                          .n_argv = 3 },
                        { .name = "bare", .interrupt_mode = "message", .path = "/b/bare/kernel.json" },
                };
                ReplyKernels ks = { .kernels = list, .n_kernels = 2, .dirs = dirs, .n_dirs = 2 }, back;

                ok(ROUND(kernels, &ks, &back) && back.n_kernels == 2 && back.n_dirs == 2 &&
                           streq(back.dirs[1], "/b") && streq(back.kernels[0].name, "ir") &&
                           streq_ptr(back.kernels[0].language, "R") && back.kernels[0].n_argv == 3 &&
                           streq(back.kernels[0].argv[2], "{kernel_file}") && !back.kernels[1].language &&
                           !back.kernels[1].display_name && streq(back.kernels[1].interrupt_mode, "message") &&
                           back.kernels[1].n_argv == 0,
                   "kernels, one spec full and one bare");
                reply_kernels_done(&back);
        }
        ok(ROUND(interrupt, &intr, &i) && i.interrupted, "interrupt");
        reply_interrupt_done(&i);
        {
                ReplyMetrics m = { .content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                   .text = "# TYPE x gauge\nx 1\n# EOF\n" },
                             back;
                ok(ROUND(metrics, &m, &back) && streq(back.content_type, m.content_type) && streq(back.text, m.text),
                   "metrics");
                reply_metrics_done(&back);
        }
        ok(ROUND(report, &report, &rep) && report_equal(&rep, &report), "report, every list");
        reply_report_done(&rep);
        report.n_stopping = 0;
        {
                json_auto_t *j = NULL;
                ok(reply_report_encode(&report, &j) == 0 && !json_object_get(j, "stopping"),
                   "report: no stopping member when nothing is stopping");
        }
        ok(ROUND(report, &report, &rep) && report_equal(&rep, &report) && !rep.stopping, "report, nothing stopping");
        reply_report_done(&rep);
        ok(ROUND(error, &err, &er) && er.code == INT32_MIN && streq(er.message, "m") &&
                   json_equal((json_t *) er.data, data),
           "error with data");
        reply_error_done(&er);
        err = (ReplyError){ .code = 1, .message = "bad \xff byte" };
        ok(ROUND(error, &err, &er) && streq(er.message, "bad \xEF\xBF\xBD byte") && !er.data,
           "error: a message that is not UTF-8 goes out with U+FFFD, without data");
        reply_error_done(&er);
}

/* ---- What a sender may not encode ---- */

/* restore = replay's members: journal and replay in a context, rebuilt in check; left out when none. */
static void test_replay_members(void) {
        ReplyContext ctx = FULL_CONTEXT;
        ReplyCheck check = { .supervisor = SUPERVISOR, .context = EMPTY_CONTEXT }, k;
        ReplyProblem p = {};
        json_auto_t *keep = NULL, *plain = NULL, *bad = NULL;
        json_t *j = NULL;

        ctx.journal = (ReplyJournal){ .valid = true, .cells = 7, .bytes = 512, .complete = false, .note = "full" };
        ctx.replay = (ReplyReplay){ .valid = true,
                                    .phase = "failed",
                                    .from_kernel = "k0",
                                    .cells = 5,
                                    .replayed = 2,
                                    .failed_cell = 4,
                                    .error = "NameError: x",
                                    .text = "replay stopped at journal cell 4" };
        check.context = ctx;
        check.rebuilt = (ReplyRebuilt){ .valid = true, .kernel_id = "k0", .cells = -1 };
        ok(ROUND(check, &check, &k), "a check with journal, replay and rebuilt round-trips");
        ok(k.context.journal.valid && k.context.journal.cells == 7 && k.context.journal.bytes == 512 &&
                   !k.context.journal.complete && streq_ptr(k.context.journal.note, "full"),
           "journal comes back");
        ok(k.context.replay.valid && streq_ptr(k.context.replay.phase, "failed") &&
                   streq_ptr(k.context.replay.from_kernel, "k0") && k.context.replay.cells == 5 &&
                   k.context.replay.replayed == 2 && k.context.replay.failed_cell == 4 &&
                   streq_ptr(k.context.replay.error, "NameError: x"),
           "replay comes back");
        ok(k.rebuilt.valid && streq_ptr(k.rebuilt.kernel_id, "k0") && k.rebuilt.cells == -1,
           "rebuilt comes back, cells null");
        reply_check_done(&k);

        check = (ReplyCheck){ .supervisor = SUPERVISOR, .context = EMPTY_CONTEXT };
        is_int(reply_check_encode(&check, &j), 0, "a check without them encodes");
        plain = j;
        ok(!json_object_get(json_object_get(plain, "context"), "journal") &&
                   !json_object_get(json_object_get(plain, "context"), "replay") && !json_object_get(plain, "rebuilt"),
           "journal, replay and rebuilt are left out when none");
        ok(ROUND(check, &check, &k) && !k.context.journal.valid && !k.context.replay.valid && !k.rebuilt.valid,
           "and decode as none");
        reply_check_done(&k);

        bad = json_deep_copy(plain);
        json_object_set_new(bad, "rebuilt", json_pack("{s:s,s:i}", "kernel_id", "k", "cells", -5));
        is_int(reply_check_decode(bad, &k, &p), -EBADMSG, "rebuilt.cells below 0 is refused");
        is_str(p.text, "rebuilt.cells: -5 is out of range [0, 9223372036854775807]", "naming it");
        reply_check_done(&k);
}

static void test_encode_refuses(void) {
        ReplyContext c = FULL_CONTEXT;
        json_t *j = NULL;

        c.name = NULL;
        is_int(reply_context_encode(&c, &j), -EINVAL, "a required string that is NULL is not encoded");
        c = FULL_CONTEXT;
        c.pid = -5;
        is_int(reply_context_encode(&c, &j), -EINVAL, "an integer out of range is not encoded");
        c = FULL_CONTEXT;
        c.last_error = "\xff\xfe";
        is_int(reply_context_encode(&c, &j), -EINVAL, "text that is not UTF-8 is refused, not mangled");
        ok(j == NULL, "nothing is returned on failure");
}

/* ---- Hostile JSON ---- */

/* Decodes text as a context after setting key to the JSON value (NULL: removing it); the problem must
 * name want (a prefix of it). */
static void hostile_context(const char *key, const char *value, const char *want, const char *label) {
        json_auto_t *j = load(START);
        ReplyContext c = { .name = "left over" };
        ReplyProblem p = {};
        int r;

        if (value)
                json_object_set_new(j, key, load(value));
        else
                json_object_del(j, key);
        r = reply_context_decode(j, &c, &p);
        if (!ok(r == -EBADMSG && strncmp(p.text, want, strlen(want)) == 0 && !c.name, "refused, %s: %s", label,
                p.text))
                printf("#   r=%d, want the problem to start with \"%s\"\n", r, want);
        reply_context_done(&c);
}

static void test_hostile_members(void) {
        static const char *const wrong[] = { "{\"x\":[1]}", "[[[]]]", "\"text\"", "1", "1.5", "true" };
        json_auto_t *fixture = load(START);
        const char *key;
        json_t *v;
        char want[64];

        /* Each member of a context: missing, and of every wrong type. */
        json_object_foreach(fixture, key, v) {
                snprintf(want, sizeof want, "%s: missing", key);
                hostile_context(key, NULL, want, key);
                for (size_t i = 0; i < ELEMENTSOF(wrong); i++) {
                        json_auto_t *w = load(wrong[i]);
                        /* Only what is wrong for the member: a null one may hold any scalar type. */
                        if (json_typeof(w) == json_typeof(v) || (json_is_number(w) && json_is_real(v)) ||
                            (json_is_null(v) && !json_is_object(w) && !json_is_array(w)))
                                continue;
                        snprintf(want, sizeof want, "%s", key);
                        hostile_context(key, wrong[i], want, key);
                }
        }
}

static void test_hostile_values(void) {
        hostile_context("pid", "1099511627776", "pid: 1099511627776 is out of range", "a pid of 2^40");
        hostile_context("pid", "0", "pid: 0 is out of range", "a pid of 0 (null says there is none)");
        hostile_context("incarnation", "-1", "incarnation: -1 is out of range", "a negative count");
        hostile_context("queued", "9223372036854775807", "queued:", "a queue of 2^63 cells");
        hostile_context("uptime", "-1.0", "uptime: expected a number of seconds", "a negative uptime");
        hostile_context("started_at", "\"2026-13-01T00:00:00.000Z\"", "started_at: expected a time", "month 13");
        hostile_context("started_at", "\" 2026-12-01T03:17:51.155Z\"", "started_at: expected a time", "a space first");
        hostile_context("started_at", "\"2026-12-01T03:17:51.155Z junk\"", "started_at:", "text after the time");
        hostile_context("started_at", "\"2026-12-01T03:17:51Z\"", "started_at:", "no milliseconds");
        hostile_context("started_at", "\"1970-01-01T00:00:00.000Z\"", "started_at:", "the epoch, which is none");
        hostile_context("last_exit",
                        "{\"code\":{\"a\":[[[[1]]]]},\"signal\":null,\"oom\":false,\"reason\":\"x\","
                        "\"at\":null}",
                        "last_exit.code: expected an integer or null", "nested junk in last_exit");
        hostile_context("last_exit",
                        "{\"code\":null,\"signal\":\"SIGNOPE\",\"oom\":false,\"reason\":\"x\",\"at\":null}",
                        "last_exit.signal: unknown signal", "an unknown signal name");
        hostile_context("last_exit",
                        "{\"code\":null,\"signal\":\"XXKILL\",\"oom\":false,\"reason\":\"x\",\"at\":null}",
                        "last_exit.signal: unknown signal", "a signal name without SIG");
        hostile_context("last_exit", "{\"code\":null,\"signal\":\"99999\",\"oom\":false,\"reason\":\"x\",\"at\":null}",
                        "last_exit.signal: unknown signal", "a signal number beyond the last");
        hostile_context("last_exit", "{\"code\":256,\"signal\":null,\"oom\":false,\"reason\":\"x\",\"at\":null}",
                        "last_exit.code: 256 is out of range", "an exit code of 256");
        hostile_context(
                "limits",
                "{\"mechanism\":\"none\",\"memory_max\":-1,\"cpu_quota\":null,\"tasks_max\":null,\"enforced\":[],"
                "\"not_enforced\":[],\"note\":null,\"group\":null,\"group_kill\":\"x\"}",
                "limits.memory_max: -1 is out of range", "a negative memory_max");
        hostile_context("limits",
                        "{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":\"4294967296%\",\"tasks_max\":null,"
                        "\"enforced\":[],\"not_enforced\":[],\"note\":null,\"group\":null,\"group_kill\":\"x\"}",
                        "limits.cpu_quota: expected a percentage from", "a cpu_quota of 2^32 %");
        hostile_context("limits",
                        "{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":\"50\",\"tasks_max\":null,"
                        "\"enforced\":[],\"not_enforced\":[],\"note\":null,\"group\":null,\"group_kill\":\"x\"}",
                        "limits.cpu_quota: expected a percentage", "a cpu_quota without %");
        hostile_context("limits",
                        "{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":\"%\",\"tasks_max\":null,"
                        "\"enforced\":[],\"not_enforced\":[],\"note\":null,\"group\":null,\"group_kill\":\"x\"}",
                        "limits.cpu_quota: expected a percentage", "a cpu_quota of only %");
        hostile_context("limits",
                        "{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":null,\"tasks_max\":null,"
                        "\"enforced\":[\"memory_max\",\"bogus\"],\"not_enforced\":[],\"note\":null,\"group\":null,"
                        "\"group_kill\":\"x\"}",
                        "limits.enforced: item 1: expected memory_max", "an unknown limit");
        hostile_context("limits",
                        "{\"mechanism\":\"none\",\"memory_max\":null,\"cpu_quota\":null,\"tasks_max\":null,"
                        "\"enforced\":[[\"memory_max\"]],\"not_enforced\":[],\"note\":null,\"group\":null,"
                        "\"group_kill\":\"x\"}",
                        "limits.enforced: item 0", "a limit that is an array");
}

/* A string of depth nested arrays: [[[...]]]. */
static char *nested(size_t depth) {
        char *s = malloc(2 * depth + 1);

        if (!s)
                return NULL;
        memset(s, '[', depth);
        memset(s + depth, ']', depth);
        s[2 * depth] = '\0';
        return s;
}

static void test_hostile_shapes(void) {
        static const char *const not_objects[] = { "[]", "null", "1", "\"status\"", "true" };
        json_auto_t *ctx = load(START), *deep = NULL;
        _cleanup_free_ char *deep_text = nested(1000);
        ReplyStatus s = {};
        ReplyProblem p = {};
        ReplyReport rep = {};
        ReplyExecResult e = {};
        ReplyOutput o = {};
        ReplyError er = {};

        for (size_t i = 0; i < ELEMENTSOF(not_objects); i++) {
                json_auto_t *j = load(not_objects[i]);
                ok(reply_status_decode(j, &s, &p) == -EBADMSG && streq(p.text, "reply: expected an object"),
                   "a status that is %s is refused", not_objects[i]);
        }
        ok(reply_status_decode(NULL, &s, &p) == -EBADMSG, "no JSON at all is refused");

        /* Many contexts, the last one junk: refused at it, nothing left allocated. */
        {
                json_auto_t *j = load(STATUS);
                json_t *list = json_object_get(j, "contexts");
                for (size_t i = 0; i < 100000; i++)
                        json_array_append(list, ctx);
                ok(reply_status_decode(j, &s, &p) == 0 && s.n_contexts == 100002, "100002 contexts decode");
                reply_status_done(&s);
                json_array_append_new(list, json_integer(5));
                ok(reply_status_decode(j, &s, &p) == -EBADMSG &&
                           streq(p.text, "contexts[100002]: expected an object") && !s.contexts && s.n_contexts == 0,
                   "junk after 100002 good contexts is refused at its index (%s)", p.text);
        }

        /* Deep nesting: ignored in a member nobody reads, refused where a struct should be. */
        deep = deep_text ? json_loads(deep_text, 0, NULL) : NULL;
        ok(deep != NULL, "1000 nested arrays parse");
        {
                json_auto_t *j = load(START);
                ReplyContext c = {};
                json_object_set(j, "from_a_newer_daemon", deep);
                ok(reply_context_decode(j, &c, &p) == 0, "an unknown member, however deep, is ignored");
                reply_context_done(&c);
                json_object_set(j, "limits", deep);
                ok(reply_context_decode(j, &c, &p) == -EBADMSG && streq(p.text, "limits: expected an object"),
                   "deep nesting where limits should be is refused");
        }

        /* The other types. */
        {
                json_auto_t *j = json_pack("{s:[s], s:[], s:[{s:s}], s:[], s:i, s:[]}", "added", "a", "removed",
                                           "restarted", "name", "b", "updated", "unchanged", 1, "not_applied");
                ok(reply_report_decode(j, &rep, &p) == -EBADMSG && streq(p.text, "restarted[0].reason: missing") &&
                           !rep.added,
                   "a restarted context without its reason is refused, the names decoded so far freed");
                json_object_set_new(j, "restarted", json_array());
                json_object_set_new(j, "stopping", json_pack("[s, i]", "x", 1));
                ok(reply_report_decode(j, &rep, &p) == -EBADMSG && streq(p.text, "stopping[1]: expected a string"),
                   "a stopping list with a number is refused");
                json_object_set_new(j, "stopping", json_null());
                ok(reply_report_decode(j, &rep, &p) == -EBADMSG &&
                           streq(p.text, "stopping: expected an array of strings"),
                   "a null stopping list is refused (absent is the empty one)");
        }
        {
                json_auto_t *j = json_pack("{s:s, s:n, s:n, s:[{s:i}]}", "status", "ok", "execution_count",
                                           "kernel_id", "outputs", "output_type", 1);
                ok(reply_exec_result_decode(j, &e, &p) == -EBADMSG &&
                           streq(p.text, "outputs: item 0: expected an object with a string output_type"),
                   "an output whose output_type is a number is refused");
                json_object_set_new(j, "outputs", json_object());
                ok(reply_exec_result_decode(j, &e, &p) == -EBADMSG, "outputs that are an object are refused");
        }
        {
                json_auto_t *j = json_pack("{s:s}", "output", "text");
                ok(reply_output_decode(j, &o, &p) == -EBADMSG && !o.output, "an output that is a string is refused");
        }
        {
                json_auto_t *j = json_pack("{s:I, s:s}", "code", (json_int_t) 1 << 40, "message", "m");
                ok(reply_error_decode(j, &er, &p) == -EBADMSG && strstr(p.text, "code: 1099511627776 is out of range"),
                   "an error code beyond 32 bits is refused");
                json_object_set_new(j, "code", json_integer(1));
                json_object_set_new(j, "message", json_null());
                ok(reply_error_decode(j, &er, &p) == -EBADMSG && streq(p.text, "message: expected a string"),
                   "an error whose message is null is refused");
        }
        {
                ReplyInterrupt i;
                json_auto_t *j = json_pack("{s:i}", "interrupted", 1);
                ok(reply_interrupt_decode(j, &i, NULL) == -EBADMSG,
                   "interrupted as a number is refused (no problem asked)");
        }
        {
                ReplyMetrics m;
                ReplyProblem why;
                json_auto_t *j = json_pack("{s:s}", "content_type", "text/plain");
                ok(reply_metrics_decode(j, &m, &why) == -EBADMSG && strstr(why.text, "text"),
                   "metrics without its text is refused, naming it");
        }
}

static void test_timestamps(void) {
        char buf[64];
        usec_t t = 0;

        ok(parse_timestamp(format_timestamp(buf, sizeof buf, T_STARTED), &t) == 0 && t == T_STARTED,
           "parse_timestamp reads what format_timestamp writes");
        ok(parse_timestamp("1970-01-01T00:00:00.001Z", &t) == 0 && t == 1000, "the first millisecond");
        ok(parse_timestamp("2026-12-01T03:17:51.155", &t) == -EINVAL, "no Z");
        ok(parse_timestamp("+026-12-01T03:17:51.155Z", &t) == -EINVAL, "a sign");
        ok(parse_timestamp("1969-12-31T23:59:59.999Z", &t) == -EINVAL, "before 1970");
        ok(parse_timestamp("", &t) == -EINVAL, "empty");
        ok(parse_timestamp("2026-02-31T00:00:00.000Z", &t) == -EINVAL, "February 31");
        ok(parse_timestamp("2026-12-01T24:00:00.000Z", &t) == -EINVAL, "hour 24");
}

/* An uptime is sent to the millisecond, and written as short as it reads back: 7.978, not 7.9779999999999998. A
 * kernel's own number that needs 17 digits keeps them. */
static void test_uptime_ms(void) {
        json_auto_t *in = load(STATUS), *out = NULL, *user = json_pack("{s:f}", "x", 0.1 + 0.2);
        _cleanup_free_ char *text = NULL, *user_text = NULL;
        ReplyProblem p = {};
        ReplyStatus v = {};

        is_int(reply_status_decode(in, &v, &p), 0, "uptime: the fixture decodes");
        v.supervisor.uptime = 7.9778529999999996;
        v.contexts[0].uptime = 123456.7894;
        is_int(reply_status_encode(&v, &out), 0, "uptime: encodes");
        text = dump(out);
        ok(text && strstr(text, "\"uptime\":7.978,") && strstr(text, "\"uptime\":123456.789,"),
           "uptime: rounded to the millisecond, written with at most 3 decimals");
        reply_status_done(&v);
        user_text = dump(user);
        is_str(user_text, "{\"x\":0.30000000000000004}", "a real that needs 17 digits keeps them");
}

int main(void) {
        test_daemon_fixtures();
        test_uptime_ms();
        test_round_trips();
        test_replay_members();
        test_encode_refuses();
        test_hostile_members();
        test_hostile_values();
        test_hostile_shapes();
        test_timestamps();
        return tap_done();
}

/* The OpenMetrics text of the daemon and its contexts (see metrics.h). Every
 * family is written whole, one context after the other, as the format wants
 * a family's samples together; label values go through
 * metrics_write_label_value. */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "exec.h"
#include "macro.h"
#include "util.h"

void metrics_write_label_value(FILE *f, const char *s) {
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '"')
                        fputs("\\\"", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static void family(FILE *f, const char *name, const char *type, const char *unit, const char *help) {
        fprintf(f, "# TYPE %s %s\n", name, type);
        if (unit)
                fprintf(f, "# UNIT %s %s\n", name, unit);
        fprintf(f, "# HELP %s %s\n", name, help);
}

/* NAME{context="C",KEY="VALUE"} and a blank: either label may be left out (NULL). */
static void sample(FILE *f, const char *name, const char *ctx, const char *key, const char *value) {
        fputs(name, f);
        if (ctx || key)
                fputc('{', f);
        if (ctx) {
                fputs("context=\"", f);
                metrics_write_label_value(f, ctx);
                fputc('"', f);
        }
        if (key) {
                fprintf(f, "%s%s=\"", ctx ? "," : "", key);
                metrics_write_label_value(f, value);
                fputc('"', f);
        }
        fputs(ctx || key ? "} " : " ", f);
}

static void sample_u64(FILE *f, const char *name, const char *ctx, const char *key, const char *value, uint64_t v) {
        sample(f, name, ctx, key, value);
        fprintf(f, "%" PRIu64 "\n", v);
}

/* ---- Per context ---- */

static const ExecCounters *exec_counters(const Context *c) {
        return exec_queue_counters(context_exec((Context *) c));
}
static uint64_t ctx_restarts(const Context *c) {
        return context_restarts(c);
}
static uint64_t ctx_oom_kills(const Context *c) {
        return context_counters(c)->deaths[KERNEL_DEATH_OOM_KILL];
}
static uint64_t ctx_heartbeat_misses(const Context *c) {
        return context_counters(c)->heartbeat_misses;
}
static uint64_t ctx_timed_out(const Context *c) {
        return exec_counters(c)->cells[EXEC_TIMEOUT];
}
static uint64_t ctx_interrupts(const Context *c) {
        return exec_counters(c)->interrupts;
}
static uint64_t ctx_kills(const Context *c) {
        return exec_counters(c)->kills;
}
static uint64_t ctx_output_cut(const Context *c) {
        return exec_counters(c)->output_cut;
}
static uint64_t ctx_queued(const Context *c) {
        return exec_queue_pending(context_exec((Context *) c));
}

/* The families with one sample per context and no other label. */
static const struct {
        const char *name, *type, *unit, *help;
        uint64_t (*value)(const Context *c);
} context_rows[] = {
        { "kernelsup_context_restarts", "counter", NULL,
          "Kernel launches after the first since the daemon first saw the context (kept across daemon restarts).",
          ctx_restarts },
        { "kernelsup_kernel_oom_kills", "counter", NULL,
          "Kernels the OOM killer ended (as its memory cgroup says), since the daemon started.", ctx_oom_kills },
        { "kernelsup_heartbeat_misses", "counter", NULL,
          "Heartbeat pings the kernel did not answer within heartbeat_interval.", ctx_heartbeat_misses },
        { "kernelsup_cells_timed_out", "counter", NULL,
          "Cells answered at their timeout (interrupted while running, or still queued).", ctx_timed_out },
        { "kernelsup_cell_interrupts", "counter", NULL,
          "Interrupts of a running cell: kernelctl interrupt, its timeout, or its client gone.", ctx_interrupts },
        { "kernelsup_kernel_kills", "counter", NULL,
          "Kernels killed because a cell did not stop within its kill_after of an interrupt.", ctx_kills },
        { "kernelsup_cell_output_cut_bytes", "counter", "bytes", "Bytes of cell output past output_limit, not kept.",
          ctx_output_cut },
        { "kernelsup_cells_queued", "gauge", NULL, "Cells waiting behind the running one (queue depth).", ctx_queued },
};

static void write_context_row(FILE *f, size_t row, Context *const *contexts, size_t n) {
        const char *suffix = streq(context_rows[row].type, "counter") ? "_total" : "";
        char name[96];

        snprintf(name, sizeof name, "%s%s", context_rows[row].name, suffix);
        family(f, context_rows[row].name, context_rows[row].type, context_rows[row].unit, context_rows[row].help);
        for (size_t i = 0; i < n; i++)
                sample_u64(f, name, context_name(contexts[i]), NULL, NULL, context_rows[row].value(contexts[i]));
}

static void write_context_states(FILE *f, Context *const *contexts, size_t n) {
        family(f, "kernelsup_context_state", "gauge", NULL, "1 for the state the context is in, 0 for the others.");
        for (size_t i = 0; i < n; i++)
                for (ContextStateKind s = 0; s < _CONTEXT_STATE_MAX; s++)
                        sample_u64(f, "kernelsup_context_state", context_name(contexts[i]), "state",
                                   context_state_to_string(s), context_state(contexts[i]) == s);
}

static void write_deaths(FILE *f, Context *const *contexts, size_t n) {
        family(f, "kernelsup_kernel_deaths", "counter", NULL,
               "Kernels that ended while nobody had asked them to stop, by reason (status's last_exit.reason).");
        for (size_t i = 0; i < n; i++)
                for (KernelDeath d = 0; d < _KERNEL_DEATH_MAX; d++)
                        sample_u64(f, "kernelsup_kernel_deaths_total", context_name(contexts[i]), "reason",
                                   kernel_death_to_string(d), context_counters(contexts[i])->deaths[d]);
}

static void write_cells(FILE *f, Context *const *contexts, size_t n) {
        family(f, "kernelsup_cells", "counter", NULL, "Cells answered, by outcome (kernelctl exec's status).");
        for (size_t i = 0; i < n; i++)
                for (ExecStatus s = 0; s < _EXEC_STATUS_MAX; s++)
                        sample_u64(f, "kernelsup_cells_total", context_name(contexts[i]), "status",
                                   exec_status_to_string(s), exec_counters(contexts[i])->cells[s]);
}

static void write_durations(FILE *f, Context *const *contexts, size_t n) {
        family(f, "kernelsup_cell_duration_seconds", "histogram", "seconds",
               "Cells that ran, by time from their start on the kernel to their answer.");
        for (size_t i = 0; i < n; i++) {
                const ExecCounters *m = exec_counters(contexts[i]);
                const char *name = context_name(contexts[i]);
                uint64_t cumulative = 0;
                char le[32];

                for (size_t b = 0; b <= EXEC_DURATION_BUCKETS; b++) {
                        cumulative += m->duration[b];
                        if (b < EXEC_DURATION_BUCKETS)
                                snprintf(le, sizeof le, "%g", exec_duration_bounds[b]);
                        else
                                snprintf(le, sizeof le, "+Inf");
                        sample_u64(f, "kernelsup_cell_duration_seconds_bucket", name, "le", le, cumulative);
                }
                sample_u64(f, "kernelsup_cell_duration_seconds_count", name, NULL, NULL, cumulative);
                sample(f, "kernelsup_cell_duration_seconds_sum", name, NULL, NULL);
                fprintf(f, "%.6f\n", m->duration_sum);
        }
}

/* ---- The daemon ---- */

static void write_daemon(FILE *f, const MetricsDaemon *d, Context *const *contexts, size_t n) {
        family(f, "kernelsup_daemon", "info", NULL, "The daemon's version.");
        sample_u64(f, "kernelsup_daemon_info", NULL, "version", d->version, 1);
        family(f, "kernelsup_daemon_generation", "gauge", NULL, "Starts of kernelsupd so far (persisted).");
        sample_u64(f, "kernelsup_daemon_generation", NULL, NULL, NULL, d->generation);
        family(f, "kernelsup_daemon_resumes", "counter", NULL,
               "Freezes of the sandbox seen since the daemon started.");
        sample_u64(f, "kernelsup_daemon_resumes_total", NULL, NULL, NULL, d->resumes);
        family(f, "kernelsup_daemon_uptime_seconds", "gauge", "seconds", "Time since the daemon started.");
        sample(f, "kernelsup_daemon_uptime_seconds", NULL, NULL, NULL);
        fprintf(f, "%.3f\n", d->uptime);

        family(f, "kernelsup_contexts", "gauge", NULL, "Contexts by state.");
        for (ContextStateKind s = 0; s < _CONTEXT_STATE_MAX; s++) {
                uint64_t k = 0;
                for (size_t i = 0; i < n; i++)
                        k += context_state(contexts[i]) == s;
                sample_u64(f, "kernelsup_contexts", NULL, "state", context_state_to_string(s), k);
        }
        if (!d->privileged)
                return;
        family(f, "kernelsup_control_connections", "gauge", NULL, "Connections to the control socket open now.");
        sample_u64(f, "kernelsup_control_connections", NULL, NULL, NULL, d->control_connections);
        if (d->rss > 0) {
                family(f, "kernelsup_daemon_resident_memory_bytes", "gauge", "bytes",
                       "The daemon's resident set size.");
                sample_u64(f, "kernelsup_daemon_resident_memory_bytes", NULL, NULL, NULL, d->rss);
        }
}

int metrics_render(const MetricsDaemon *d, Context *const *contexts, size_t n, char **ret) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        bool failed;

        if (!f)
                return -ENOMEM;
        write_daemon(f, d, contexts, n);
        write_context_states(f, contexts, n);
        write_deaths(f, contexts, n);
        write_cells(f, contexts, n);
        write_durations(f, contexts, n);
        for (size_t row = 0; row < ELEMENTSOF(context_rows); row++)
                write_context_row(f, row, contexts, n);
        fputs("# EOF\n", f);
        failed = ferror(f);
        if (fclose(f) != 0 || failed) {
                free(buf);
                return -ENOMEM;
        }
        *ret = buf;
        return 0;
}

int metrics_rss(uint64_t *ret) {
        _cleanup_free_ char *text = NULL;
        unsigned long long pages, resident;
        long page = sysconf(_SC_PAGESIZE);
        int r;

        r = read_file("/proc/self/statm", 4096, &text, NULL);
        if (r < 0)
                return r;
        if (sscanf(text, "%llu %llu", &pages, &resident) != 2 || page <= 0)
                return -EBADMSG;
        *ret = (uint64_t) resident * (uint64_t) page;
        return 0;
}

/* The keys of kernelsup.ini (name, section, parser, where the value goes), a context's built-in defaults, and what
 * reading (config.c) and resolving (config-resolve.c) share of the parser: its sections and its errors. */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-private.h"
#include "config-value.h"
#include "config.h"
#include "util.h"

#define SUPERVISOR_KEY(k, p, field, t)                                                                                \
        { SECTION_SUPERVISOR, k, p, offsetof(Config, field), t }
#define CONTEXT_KEY(k, p, field, t)                                                                                   \
        { SECTION_CONTEXT, k, p, offsetof(ContextConfig, field), t }

const ConfigKey config_keys[_KEY_MAX] = {
        [KEY_SOCKET] = SUPERVISOR_KEY("socket", parse_socket_path, socket_path, VALUE_STRING),
        [KEY_SOCKET_MODE] = SUPERVISOR_KEY("socket_mode", parse_socket_mode, socket_mode, VALUE_MODE),
        [KEY_SOCKET_USER] = SUPERVISOR_KEY("socket_user", parse_user_name, socket_user, VALUE_STRING),
        [KEY_SOCKET_GROUP] = SUPERVISOR_KEY("socket_group", parse_user_name, socket_group, VALUE_STRING),
        [KEY_RUNTIME_DIR] = SUPERVISOR_KEY("runtime_dir", parse_absolute_path, runtime_dir, VALUE_STRING),
        [KEY_STATE_DIR] = SUPERVISOR_KEY("state_dir", parse_absolute_path, state_dir, VALUE_STRING),
        [KEY_CONTEXTS_DIR] = SUPERVISOR_KEY("contexts_dir", parse_absolute_path, contexts_dir, VALUE_STRING),
        [KEY_PORT_RANGE] = SUPERVISOR_KEY("port_range", parse_port_range, port_min, VALUE_PORTS),
        [KEY_ARGV] = CONTEXT_KEY("argv", parse_argv, argv, VALUE_STRV),
        [KEY_RESTART] = CONTEXT_KEY("restart", parse_restart, restart, VALUE_RESTART),
        [KEY_CONNECTION_FILE] = CONTEXT_KEY("connection_file", parse_absolute_path, connection_file, VALUE_STRING),
        [KEY_USER] = CONTEXT_KEY("user", parse_user_name, user, VALUE_STRING),
        [KEY_GROUP] = CONTEXT_KEY("group", parse_user_name, group, VALUE_STRING),
        [KEY_CWD] = CONTEXT_KEY("cwd", parse_absolute_path, cwd, VALUE_STRING),
        [KEY_ENV] = CONTEXT_KEY("env", parse_env, env, VALUE_ENV),
        [KEY_AUTOSTART] = CONTEXT_KEY("autostart", parse_bool, autostart, VALUE_BOOL),
        [KEY_START_TIMEOUT] = CONTEXT_KEY("start_timeout", parse_duration_positive, start_timeout, VALUE_USEC),
        [KEY_STOP_TIMEOUT] = CONTEXT_KEY("stop_timeout", parse_duration_positive, stop_timeout, VALUE_USEC),
        [KEY_START_LIMIT_BURST] = CONTEXT_KEY("start_limit_burst", parse_count, start_limit_burst, VALUE_UNSIGNED),
        [KEY_START_LIMIT_INTERVAL] =
                CONTEXT_KEY("start_limit_interval", parse_duration_positive, start_limit_interval, VALUE_USEC),
        [KEY_FAILED_COOLDOWN] = CONTEXT_KEY("failed_cooldown", parse_duration_positive, failed_cooldown, VALUE_USEC),
        [KEY_BACKOFF_MIN] = CONTEXT_KEY("backoff_min", parse_duration_positive, backoff_min, VALUE_USEC),
        [KEY_BACKOFF_MAX] = CONTEXT_KEY("backoff_max", parse_duration_positive, backoff_max, VALUE_USEC),
        [KEY_BACKOFF_RESET] = CONTEXT_KEY("backoff_reset", parse_duration_positive, backoff_reset, VALUE_USEC),
        [KEY_HEARTBEAT_INTERVAL] =
                CONTEXT_KEY("heartbeat_interval", parse_duration_positive, heartbeat_interval, VALUE_USEC),
        [KEY_HEARTBEAT_MISSES] = CONTEXT_KEY("heartbeat_misses", parse_count, heartbeat_misses, VALUE_UNSIGNED),
        [KEY_UNRESPONSIVE_RESTART] =
                CONTEXT_KEY("unresponsive_restart", parse_duration_or_no, unresponsive_restart, VALUE_USEC),
        [KEY_OUTPUT_LIMIT] = CONTEXT_KEY("output_limit", parse_size, output_limit, VALUE_SIZE),
        [KEY_MEMORY_MAX] = CONTEXT_KEY("memory_max", parse_memory, memory_max, VALUE_U64),
        [KEY_CPU_QUOTA] = CONTEXT_KEY("cpu_quota", parse_cpu_quota, cpu_quota, VALUE_UNSIGNED),
        [KEY_TASKS_MAX] = CONTEXT_KEY("tasks_max", parse_tasks, tasks_max, VALUE_UNSIGNED),
        [KEY_TRANSPORT] = CONTEXT_KEY("transport", parse_transport, transport, VALUE_TRANSPORT),
        [KEY_SHUTDOWN_GRACE] = CONTEXT_KEY("shutdown_grace", parse_duration_positive, shutdown_grace, VALUE_USEC),
        [KEY_OUTPUT_CHUNKING] = CONTEXT_KEY("output_chunking", parse_bool, output_chunking, VALUE_BOOL),
        [KEY_PRELOAD] = CONTEXT_KEY("preload", parse_preload, preload, VALUE_PRELOAD),
        [KEY_KERNEL] = CONTEXT_KEY("kernel", parse_kernel_name, kernel, VALUE_STRING),
        [KEY_RESTORE] = CONTEXT_KEY("restore", parse_restore, restore, VALUE_RESTORE),
        [KEY_JOURNAL_MAX] = CONTEXT_KEY("journal_max", parse_size, journal_max, VALUE_SIZE),
        [KEY_RESTORE_TIMEOUT] = CONTEXT_KEY("restore_timeout", parse_duration_positive, restore_timeout, VALUE_USEC),
        [KEY_EXECUTIONS_MEMORY] = SUPERVISOR_KEY("executions_memory", parse_size, executions_memory, VALUE_SIZE),
        [KEY_EXECUTIONS_KEEP] = CONTEXT_KEY("executions_keep", parse_count, executions_keep, VALUE_UNSIGNED),
        [KEY_EXECUTIONS_TTL] = CONTEXT_KEY("executions_ttl", parse_duration_positive, executions_ttl, VALUE_USEC),
        [KEY_USER_CONTEXTS_MAX] =
                SUPERVISOR_KEY("user_contexts_max", parse_count_or_zero, user_contexts_max, VALUE_UNSIGNED),
        [KEY_ADDED_BY] = CONTEXT_KEY("added_by", parse_uid, added_by, VALUE_UNSIGNED),
};
_Static_assert(sizeof(uid_t) == sizeof(unsigned), "added_by is copied as a VALUE_UNSIGNED");

const ConfigKey *config_key_find(SectionKind kind, const char *key) {
        SectionKind want = kind == SECTION_SUPERVISOR ? SECTION_SUPERVISOR : SECTION_CONTEXT;

        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
                if (config_keys[i].section == want && streq(config_keys[i].key, key))
                        return &config_keys[i];
        return NULL;
}

size_t value_size(ValueType t) {
        switch (t) {
        case VALUE_BOOL:
                return sizeof(bool);
        case VALUE_USEC:
                return sizeof(usec_t);
        case VALUE_UNSIGNED:
                return sizeof(unsigned);
        case VALUE_SIZE:
                return sizeof(size_t);
        case VALUE_U64:
                return sizeof(uint64_t);
        case VALUE_RESTART:
                return sizeof(RestartPolicy);
        case VALUE_TRANSPORT:
                return sizeof(Transport);
        case VALUE_PRELOAD:
                return sizeof(Preload);
        case VALUE_RESTORE:
                return sizeof(Restore);
        case VALUE_MODE:
                return sizeof(mode_t);
        default:
                return 0;
        }
}

void context_config_init(ContextConfig *cc) {
        *cc = (ContextConfig){
                .restart = RESTART_ALWAYS,
                .autostart = true,
                .start_timeout = 30 * USEC_PER_SEC,
                .stop_timeout = 10 * USEC_PER_SEC,
                .start_limit_burst = 5,
                .start_limit_interval = 60 * USEC_PER_SEC,
                .failed_cooldown = 5 * 60 * USEC_PER_SEC,
                .backoff_min = 100 * USEC_PER_MSEC,
                .backoff_max = 30 * USEC_PER_SEC,
                .backoff_reset = 10 * USEC_PER_SEC,
                .heartbeat_interval = 5 * USEC_PER_SEC,
                .heartbeat_misses = 3,
                .unresponsive_restart = 0,
                .output_limit = 10 * 1024 * 1024,
                .transport = TRANSPORT_AUTO,
                .shutdown_grace = 500 * USEC_PER_MSEC,
                .output_chunking = true,
                .restore = RESTORE_NONE,
                .journal_max = 16 * 1024 * 1024,
                .restore_timeout = 10 * 60 * USEC_PER_SEC,
                .executions_keep = 32,
                .executions_ttl = 60 * 60 * USEC_PER_SEC,
                .added_by = (uid_t) -1,
        };
}

void context_config_done(ContextConfig *cc) {
        free(cc->name);
        free(cc->source.file);
        strv_free(cc->argv);
        free(cc->kernel);
        free(cc->kernel_path);
        free(cc->kernel_error);
        free(cc->language);
        free(cc->connection_file);
        free(cc->user);
        free(cc->group);
        free(cc->cwd);
        strv_free(cc->env);
}

static void section_done(Section *s) {
        context_config_done(&s->cc);
        for (size_t i = 0; i < ELEMENTSOF(s->keys); i++)
                free(s->keys[i].raw);
}

static Section *section_free(Section *s) {
        if (s)
                section_done(s);
        free(s);
        return NULL;
}

const char *section_label(const Section *s, char *buf, size_t size) {
        if (s->kind == SECTION_SUPERVISOR)
                return "supervisor";
        if (s->kind == SECTION_DEFAULTS)
                return "defaults";
        snprintf(buf, size, "context:%s", s->cc.name);
        return buf;
}

void parser_done(Parser *p) {
        section_done(&p->supervisor);
        section_done(&p->defaults_section);
        for (size_t i = 0; i < p->n_contexts; i++)
                section_free(p->contexts[i]);
        free(p->contexts);
        str_index_done(&p->context_names);
        free(p->error);
}

int parser_fail(Parser *p, int r, const char *fmt, ...) {
        va_list ap;

        if (p->r < 0)
                return p->r;
        p->r = r;
        va_start(ap, fmt);
        if (vasprintf(&p->error, fmt, ap) < 0)
                p->error = NULL;
        va_end(ap);
        return r;
}

int parser_oom(Parser *p) {
        return parser_fail(p, -ENOMEM, "out of memory");
}

/* A value as quoted in messages: at most VALUE_SHOWN_MAX bytes, not cut inside a UTF-8 sequence, then "…". */
const char *value_shorten(const char *value, char buf[static VALUE_SHOWN_MAX + 4]) {
        size_t n = VALUE_SHOWN_MAX;

        if (strlen(value) <= VALUE_SHOWN_MAX)
                return value;
        while (n > 0 && ((unsigned char) value[n] & 0xc0) == 0x80)
                n--;
        memcpy(buf, value, n);
        memcpy(buf + n, "…", sizeof("…"));
        return buf;
}

/* "<file>:<line>: [<section>] <key> = <value>: <reason>" */
int parser_fail_key(Parser *p, const char *file, unsigned line, const Section *s, const char *key, const char *value,
                    const char *reason) {
        char label[96], shown[VALUE_SHOWN_MAX + 4];

        return parser_fail(p, -EINVAL, "%s:%u: [%s] %s = %s: %s", file, line, section_label(s, label, sizeof label),
                           key, value_shorten(value, shown), reason);
}

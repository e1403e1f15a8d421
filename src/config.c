/* The configuration: the main INI file, then every *.ini in contexts_dir.
 *
 * inih (Debian's r55: a 200-byte line buffer, no line numbers, no callback for section headers, section names cut
 * at 49 bytes) does the tokenising. Our line reader in front of it counts lines, rejects NUL bytes and over-long
 * lines, and classifies each line exactly as inih will, so that it sees every section header itself: an empty
 * [context:NAME] still defines a context, long context names are not truncated, and a bad header is reported at
 * its own line. Parsing stops at the first error, which names file and line.
 *
 * Every value is parsed and checked as it is read, so errors come in file order, but each section keeps its own
 * settings. Contexts are resolved only after all files are read (built-in defaults, then [defaults], then the
 * context's own keys), so [defaults] applies to every context wherever it stands in the main file. */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "config.h"
#include "util.h"

/* Configuration files are small; this only bounds what a mistake (a log file named *.ini) can cost. */
#define CONFIG_FILE_MAX (1024 * 1024)
/* Values quoted in error messages are cut to this many bytes. */
#define VALUE_SHOWN_MAX 80

/* History in memory: a user's kernels share HOME/.ipython/profile_default/history.sqlite otherwise, and a
 * kernel that finds it locked prints a warning into a cell's output. */
#define DEFAULT_ARGV "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file} --HistoryManager.hist_file=:memory:"
#define DEFAULT_PORT_MIN 20000
#define DEFAULT_PORT_MAX 32000
/* A kernel listens on five ports: shell, iopub, stdin, control and heartbeat. */
#define PORTS_PER_KERNEL 5

typedef enum SectionKind {
        SECTION_SUPERVISOR,
        SECTION_DEFAULTS,
        SECTION_CONTEXT,
} SectionKind;

/* How a parsed value is copied when a context is resolved. */
typedef enum ValueType {
        VALUE_STRING,
        VALUE_STRV, /* takes continuation lines: more words */
        VALUE_ENV,  /* repeatable, and takes continuation lines: more variables */
        VALUE_BOOL,
        VALUE_USEC,
        VALUE_UNSIGNED,
        VALUE_SIZE,
        VALUE_U64,
        VALUE_RESTART,
        VALUE_PORTS,
        VALUE_TRANSPORT,
        VALUE_PRELOAD,
} ValueType;

/* Parses value into *data, which it writes only on success. On -EINVAL, *ret_reason says why in a few words. */
typedef int (*ValueParser)(const char *value, void *data, const char **ret_reason);

typedef struct ConfigKey {
        SectionKind section; /* SECTION_SUPERVISOR, or SECTION_CONTEXT for [defaults] and [context:NAME] alike */
        const char *key;
        ValueParser parse;
        size_t offset; /* into Config for [supervisor], into ContextConfig otherwise */
        ValueType type;
} ConfigKey;

static int parse_absolute_path(const char *value, void *data, const char **ret_reason) {
        char *s;

        if (value[0] != '/') {
                *ret_reason = "must be an absolute path";
                return -EINVAL;
        }
        s = strdup(value);
        if (!s)
                return -ENOMEM;
        *(char **) data = s;
        return 0;
}

static int parse_socket_path(const char *value, void *data, const char **ret_reason) {
        if (value[0] == '/' && strlen(value) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
                *ret_reason = "too long for a Unix socket (at most 107 bytes)";
                return -EINVAL;
        }
        return parse_absolute_path(value, data, ret_reason);
}

/* "MIN-MAX" into two adjacent uint16_t (Config's port_min and port_max). */
static int parse_port_range(const char *value, void *data, const char **ret_reason) {
        unsigned long long lo = 0, hi = 0;
        char buf[32], *dash;
        int r_lo, r_hi;

        if (strlen(value) >= sizeof buf)
                goto bad_form;
        strcpy(buf, value);
        dash = strchr(buf, '-');
        if (!dash)
                goto bad_form;
        *dash = '\0';
        /* Blanks around the dash are allowed: "20000 - 32000". */
        for (char *e = dash; e > buf && isspace((unsigned char) e[-1]); e--)
                e[-1] = '\0';
        for (dash++; isspace((unsigned char) *dash); dash++)
                ;
        r_lo = parse_uint(buf, 0, 65535, &lo);
        r_hi = parse_uint(dash, 0, 65535, &hi);
        if (r_lo == -EINVAL || r_hi == -EINVAL)
                goto bad_form;
        if (r_hi < 0) {
                *ret_reason = "MAX must be at most 65535";
                return -EINVAL;
        }
        if (r_lo < 0 || lo + (PORTS_PER_KERNEL - 1) > hi) {
                *ret_reason = "MAX must be at least MIN+4 (a kernel needs 5 ports)";
                return -EINVAL;
        }
        if (lo < 1024) {
                *ret_reason = "MIN must be at least 1024";
                return -EINVAL;
        }
        ((uint16_t *) data)[0] = (uint16_t) lo;
        ((uint16_t *) data)[1] = (uint16_t) hi;
        return 0;

bad_form:
        *ret_reason = "expected MIN-MAX, such as 20000-32000";
        return -EINVAL;
}
_Static_assert(offsetof(Config, port_max) == offsetof(Config, port_min) + sizeof(uint16_t),
               "parse_port_range() writes port_min and port_max as a pair");

/* Splits on blanks. '…' quotes literally; "…" quotes with \" and \\ as the only escapes (any other backslash is
 * kept). Quoted and unquoted pieces next to each other make one word, as in a shell. */
static int argv_split(const char *s, char ***ret, const char **ret_reason) {
        _cleanup_strv_free_ char **v = NULL;
        _cleanup_free_ char *word = NULL;
        size_t n = 0;
        int r;

        /* No word is longer than the whole text. */
        word = malloc(strlen(s) + 1);
        if (!word)
                return -ENOMEM;
        for (;;) {
                size_t k = 0;

                while (isspace((unsigned char) *s))
                        s++;
                if (!*s)
                        break;
                while (*s && !isspace((unsigned char) *s)) {
                        if (*s == '\'') {
                                const char *e = strchr(s + 1, '\'');

                                if (!e) {
                                        *ret_reason = "unterminated ' quote";
                                        return -EINVAL;
                                }
                                memcpy(word + k, s + 1, (size_t) (e - s - 1));
                                k += (size_t) (e - s - 1);
                                s = e + 1;
                        } else if (*s == '"') {
                                for (s++; *s != '"'; s++) {
                                        if (!*s) {
                                                *ret_reason = "unterminated \" quote";
                                                return -EINVAL;
                                        }
                                        if (*s == '\\' && (s[1] == '"' || s[1] == '\\'))
                                                s++;
                                        word[k++] = *s;
                                }
                                s++;
                        } else
                                word[k++] = *s++;
                }
                r = strv_push(&v, &n, strndup(word, k));
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

/* A first line sets argv; a continuation line (when *data is already set) appends its words. */
static int parse_argv(const char *value, void *data, const char **ret_reason) {
        char ***argv = data;
        _cleanup_strv_free_ char **words = NULL;
        size_t n;
        int r;

        r = argv_split(value, &words, ret_reason);
        if (r < 0)
                return r;
        if (!*argv) {
                if (!words) {
                        *ret_reason = "must not be empty";
                        return -EINVAL;
                }
                if (words[0][0] != '/') {
                        *ret_reason = "argv[0] must be an absolute path (the kernel is executed without $PATH)";
                        return -EINVAL;
                }
                *argv = TAKE_PTR(words);
                return 0;
        }
        n = strv_length(*argv);
        for (size_t i = 0; words && words[i]; i++) {
                r = strv_push(argv, &n, strdup(words[i]));
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_restart(const char *value, void *data, const char **ret_reason) {
        int p = restart_policy_from_string(value);

        if (p < 0) {
                *ret_reason = "expected always, on-failure or no";
                return -EINVAL;
        }
        *(RestartPolicy *) data = (RestartPolicy) p;
        return 0;
}

/* Users and groups are resolved when a kernel is spawned, not here (no NSS in a pure parser): only a value that
 * can be no name nor id is refused. */
static int parse_user_name(const char *value, void *data, const char **ret_reason) {
        char *s;

        if (!*value) {
                *ret_reason = "must not be empty";
                return -EINVAL;
        }
        if (strpbrk(value, ":/")) {
                *ret_reason = "must not contain ':' or '/'";
                return -EINVAL;
        }
        s = strdup(value);
        if (!s)
                return -ENOMEM;
        *(char **) data = s;
        return 0;
}

static bool env_name_valid(const char *s, size_t n) {
        if (n == 0 || !(isalpha((unsigned char) s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char) s[i]) || s[i] == '_'))
                        return false;
        return true;
}

/* Sets "K=V" in *env, a copy of kv (see strv_env_set()). */
static int env_set(char ***env, const char *kv) {
        size_t n = strv_length(*env);

        return strv_env_set(env, &n, strdup(kv));
}

static int parse_env(const char *value, void *data, const char **ret_reason) {
        const char *eq = strchr(value, '=');

        if (!eq) {
                *ret_reason = "expected NAME=VALUE";
                return -EINVAL;
        }
        if (!env_name_valid(value, (size_t) (eq - value))) {
                *ret_reason = "invalid variable name (expected [A-Za-z_][A-Za-z0-9_]*)";
                return -EINVAL;
        }
        return env_set(data, value);
}

static int parse_bool(const char *value, void *data, const char **ret_reason) {
        static const char *const yes[] = { "yes", "true", "on", "1" }, *const no[] = { "no", "false", "off", "0" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
                if (strcasecmp(value, yes[i]) == 0) {
                        *(bool *) data = true;
                        return 0;
                }
                if (strcasecmp(value, no[i]) == 0) {
                        *(bool *) data = false;
                        return 0;
                }
        }
        *ret_reason = "expected yes or no (or true/false, on/off, 1/0)";
        return -EINVAL;
}

/* Every duration here is a delay or a deadline the supervisor arms: zero would make a busy loop or an instant
 * kill, and infinity would strand a kernel (a start that never times out, a failed context never retried). */
static int parse_duration_positive(const char *value, void *data, const char **ret_reason) {
        usec_t u;
        int r;

        r = parse_duration(value, &u);
        if (r == -ERANGE) {
                *ret_reason = "too large";
                return -EINVAL;
        }
        if (r < 0) {
                *ret_reason = "expected a duration such as 500ms, 30s or 5min";
                return -EINVAL;
        }
        if (u == USEC_INFINITY) {
                *ret_reason = "must be finite";
                return -EINVAL;
        }
        if (u == 0) {
                *ret_reason = "must be greater than 0";
                return -EINVAL;
        }
        *(usec_t *) data = u;
        return 0;
}

/* "no" (never: 0), or a positive duration. */
static int parse_duration_or_no(const char *value, void *data, const char **ret_reason) {
        if (strcasecmp(value, "no") == 0 || strcasecmp(value, "off") == 0) {
                *(usec_t *) data = 0;
                return 0;
        }
        if (parse_duration_positive(value, data, ret_reason) < 0) {
                *ret_reason = "expected no, or a duration such as 30s or 5min";
                return -EINVAL;
        }
        return 0;
}

/* Bytes, with an optional K, M or G suffix (powers of 1024): "10M". At least 1 KiB, at most 1 GiB. */
static int parse_size(const char *value, void *data, const char **ret_reason) {
        static const struct {
                const char *suffix;
                unsigned long long mult;
        } units[] = { { "", 1 }, { "K", 1024 }, { "M", 1024 * 1024 }, { "G", 1024 * 1024 * 1024 } };
        unsigned long long v;
        char digits[32];
        size_t n = strspn(value, "0123456789");

        if (n == 0 || n >= sizeof digits)
                goto bad;
        memcpy(digits, value, n);
        digits[n] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (strcasecmp(value + n, units[i].suffix) != 0 || parse_uint(digits, 0, ULLONG_MAX, &v) < 0)
                        continue;
                if (v > (1ULL << 30) / units[i].mult || v * units[i].mult < 1024) {
                        *ret_reason = "must be from 1K to 1G";
                        return -EINVAL;
                }
                *(size_t *) data = (size_t) (v * units[i].mult);
                return 0;
        }
bad:
        *ret_reason = "expected a size such as 512K or 10M";
        return -EINVAL;
}

/* A memory limit: bytes with an optional K, M, G or T suffix (powers of 1024), at least 1M; or "none" (0). */
static int parse_memory(const char *value, void *data, const char **ret_reason) {
        static const struct {
                const char *suffix;
                unsigned long long mult;
        } units[] = { { "", 1 }, { "K", 1ULL << 10 }, { "M", 1ULL << 20 }, { "G", 1ULL << 30 }, { "T", 1ULL << 40 } };
        unsigned long long v;
        char digits[32];
        size_t n = strspn(value, "0123456789");

        if (strcasecmp(value, "none") == 0) {
                *(uint64_t *) data = 0;
                return 0;
        }
        if (n == 0 || n >= sizeof digits)
                goto bad;
        memcpy(digits, value, n);
        digits[n] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (strcasecmp(value + n, units[i].suffix) != 0 || parse_uint(digits, 0, ULLONG_MAX, &v) < 0)
                        continue;
                if (v > (1ULL << 50) / units[i].mult || v * units[i].mult < (1ULL << 20)) {
                        *ret_reason = "must be from 1M to 1024T";
                        return -EINVAL;
                }
                *(uint64_t *) data = v * units[i].mult;
                return 0;
        }
bad:
        *ret_reason = "expected a size such as 512M or 4G, or none";
        return -EINVAL;
}

/* A CPU quota in percent of one CPU: "50%", "200%" (two CPUs). */
static int parse_cpu_quota(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;
        size_t n = strlen(value);
        char digits[16];

        if (strcasecmp(value, "none") == 0) {
                *(unsigned *) data = 0;
                return 0;
        }
        if (n < 2 || n > sizeof digits || value[n - 1] != '%')
                goto bad;
        memcpy(digits, value, n - 1);
        digits[n - 1] = '\0';
        if (parse_uint(digits, 1, 100000, &v) < 0)
                goto bad;
        *(unsigned *) data = (unsigned) v;
        return 0;
bad:
        *ret_reason = "expected a percentage of one CPU from 1% to 100000%, such as 50% or 200%, or none";
        return -EINVAL;
}

static int parse_tasks(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;

        if (strcasecmp(value, "none") == 0) {
                *(unsigned *) data = 0;
                return 0;
        }
        if (parse_uint(value, 1, 4194304, &v) < 0) {
                *ret_reason = "expected a number from 1 to 4194304, or none";
                return -EINVAL;
        }
        *(unsigned *) data = (unsigned) v;
        return 0;
}

static int parse_transport(const char *value, void *data, const char **ret_reason) {
        int t = transport_from_string(value);

        if (t < 0) {
                *ret_reason = "expected ipc or tcp";
                return -EINVAL;
        }
        *(Transport *) data = t;
        return 0;
}

static const char *const preload_names[_PRELOAD_MAX] = {
        [PRELOAD_AUTO] = "auto",
        [PRELOAD_YES] = "yes",
        [PRELOAD_NO] = "no",
};

const char *preload_to_string(Preload p) {
        return p >= 0 && p < _PRELOAD_MAX ? preload_names[p] : NULL;
}

static int parse_preload(const char *value, void *data, const char **ret_reason) {
        for (Preload p = 0; p < _PRELOAD_MAX; p++)
                if (streq(value, preload_names[p])) {
                        *(Preload *) data = p;
                        return 0;
                }
        *ret_reason = "expected auto, yes or no";
        return -EINVAL;
}

static int parse_count(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;

        if (parse_uint(value, 1, 1000, &v) < 0) {
                *ret_reason = "expected a number from 1 to 1000";
                return -EINVAL;
        }
        *(unsigned *) data = (unsigned) v;
        return 0;
}

enum {
        KEY_SOCKET,
        KEY_RUNTIME_DIR,
        KEY_STATE_DIR,
        KEY_CONTEXTS_DIR,
        KEY_PORT_RANGE,
        KEY_ARGV,
        KEY_RESTART,
        KEY_CONNECTION_FILE,
        KEY_USER,
        KEY_GROUP,
        KEY_CWD,
        KEY_ENV,
        KEY_AUTOSTART,
        KEY_START_TIMEOUT,
        KEY_STOP_TIMEOUT,
        KEY_START_LIMIT_BURST,
        KEY_START_LIMIT_INTERVAL,
        KEY_FAILED_COOLDOWN,
        KEY_BACKOFF_MIN,
        KEY_BACKOFF_MAX,
        KEY_BACKOFF_RESET,
        KEY_HEARTBEAT_INTERVAL,
        KEY_HEARTBEAT_MISSES,
        KEY_UNRESPONSIVE_RESTART,
        KEY_OUTPUT_LIMIT,
        KEY_MEMORY_MAX,
        KEY_CPU_QUOTA,
        KEY_TASKS_MAX,
        KEY_TRANSPORT,
        KEY_SHUTDOWN_GRACE,
        KEY_PRELOAD,
        _KEY_MAX,
};

#define SUPERVISOR_KEY(k, p, field, t)                                                                                \
        { SECTION_SUPERVISOR, k, p, offsetof(Config, field), t }
#define CONTEXT_KEY(k, p, field, t)                                                                                   \
        { SECTION_CONTEXT, k, p, offsetof(ContextConfig, field), t }

static const ConfigKey config_keys[_KEY_MAX] = {
        [KEY_SOCKET] = SUPERVISOR_KEY("socket", parse_socket_path, socket_path, VALUE_STRING),
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
        [KEY_PRELOAD] = CONTEXT_KEY("preload", parse_preload, preload, VALUE_PRELOAD),
};

static const ConfigKey *config_key_find(SectionKind kind, const char *key) {
        SectionKind want = kind == SECTION_SUPERVISOR ? SECTION_SUPERVISOR : SECTION_CONTEXT;

        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
                if (config_keys[i].section == want && streq(config_keys[i].key, key))
                        return &config_keys[i];
        return NULL;
}

static size_t value_size(ValueType t) {
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
        default:
                return 0;
        }
}

static void context_config_init(ContextConfig *cc) {
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
                .transport = TRANSPORT_IPC,
                .shutdown_grace = 500 * USEC_PER_MSEC,
        };
}

static void context_config_done(ContextConfig *cc) {
        free(cc->name);
        free(cc->source.file);
        strv_free(cc->argv);
        free(cc->connection_file);
        free(cc->user);
        free(cc->group);
        free(cc->cwd);
        strv_free(cc->env);
}

/* One section as written: which keys it set, where, and to what. */
typedef struct KeySetting {
        unsigned line; /* 0: not set in this section */
        char *raw;     /* the value as written (its first line), for messages after parsing */
} KeySetting;

typedef struct Section {
        SectionKind kind;
        ContextConfig cc; /* name and source are the header; [supervisor] keeps its values in the Config */
        KeySetting keys[_KEY_MAX];
} Section;

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

static const char *section_label(const Section *s, char *buf, size_t size) {
        if (s->kind == SECTION_SUPERVISOR)
                return "supervisor";
        if (s->kind == SECTION_DEFAULTS)
                return "defaults";
        snprintf(buf, size, "context:%s", s->cc.name);
        return buf;
}

typedef struct Parser {
        const ConfigDefaults *defaults;
        Config *config;
        Section supervisor, defaults_section;
        Section **contexts; /* in the order they were defined */
        size_t n_contexts, n_allocated;
        StrIndex context_names; /* name -> index into contexts */

        /* The file being read. */
        const char *file;
        bool in_contexts_dir;
        const char *data;
        size_t size, pos;
        unsigned line;
        Section *section;          /* NULL before the first header */
        const ConfigKey *last_key; /* what an indented line continues (inih's prev_name) */
        bool continuation;         /* the current line is such a continuation */

        /* The first error: once set, the reader reports end of file and the handler refuses everything. */
        int r;
        char *error;
} Parser;

static void parser_done(Parser *p) {
        section_done(&p->supervisor);
        section_done(&p->defaults_section);
        for (size_t i = 0; i < p->n_contexts; i++)
                section_free(p->contexts[i]);
        free(p->contexts);
        str_index_done(&p->context_names);
        free(p->error);
}

/* Records the first error. Returns r, so callers can "return parser_fail(...)". */
_printf_(3, 4) static int parser_fail(Parser *p, int r, const char *fmt, ...) {
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

static int parser_oom(Parser *p) {
        return parser_fail(p, -ENOMEM, "out of memory");
}

/* A value as quoted in messages: at most VALUE_SHOWN_MAX bytes, not cut inside a UTF-8 sequence, then "…". */
static const char *value_shorten(const char *value, char buf[static VALUE_SHOWN_MAX + 4]) {
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
static int parser_fail_key(Parser *p, const char *file, unsigned line, const Section *s, const char *key,
                           const char *value, const char *reason) {
        char label[96], shown[VALUE_SHOWN_MAX + 4];

        return parser_fail(p, -EINVAL, "%s:%u: [%s] %s = %s: %s", file, line, section_label(s, label, sizeof label),
                           key, value_shorten(value, shown), reason);
}

/* inih's own scanner: the first of chars, or of an inline comment (a ';' after a blank), or the end. */
static const char *find_chars_or_comment(const char *s, const char *chars) {
        bool was_space = false;

        while (*s && !(chars && strchr(chars, *s)) && !(was_space && *s == ';')) {
                was_space = isspace((unsigned char) *s);
                s++;
        }
        return s;
}

static int parser_begin_section(Parser *p, const char *name, size_t len) {
        _cleanup_free_ char *title = strndup(name, len);
        char shown[VALUE_SHOWN_MAX + 4];
        Section *s;

        if (!title)
                return parser_oom(p);
        p->section = NULL;
        p->last_key = NULL;

        if (streq(title, "supervisor") || streq(title, "defaults")) {
                s = streq(title, "supervisor") ? &p->supervisor : &p->defaults_section;
                if (p->in_contexts_dir)
                        return parser_fail(p, -EINVAL,
                                           "%s:%u: [%s] is not allowed here: files in contexts_dir may only hold "
                                           "[context:NAME] sections",
                                           p->file, p->line, title);
                if (s->cc.source.file)
                        return parser_fail(p, -EINVAL, "%s:%u: [%s] defined again (first at %s:%u)", p->file, p->line,
                                           title, s->cc.source.file, s->cc.source.line);
        } else if (strncmp(title, "context:", strlen("context:")) == 0) {
                const char *ctx = title + strlen("context:");
                Section **a;

                if (!context_name_valid(ctx))
                        return parser_fail(p, -EINVAL,
                                           "%s:%u: [%s]: invalid context name (1 to 64 letters, digits, '_', '.' "
                                           "or '-')",
                                           p->file, p->line, value_shorten(title, shown));
                size_t first;
                int r;

                if (p->n_contexts == p->n_allocated) {
                        size_t n = p->n_allocated ? 2 * p->n_allocated : 16;
                        a = reallocarray(p->contexts, n, sizeof(Section *));
                        if (!a)
                                return parser_oom(p);
                        p->contexts = a;
                        p->n_allocated = n;
                }
                s = calloc(1, sizeof(Section));
                if (!s)
                        return parser_oom(p);
                p->contexts[p->n_contexts++] = s;
                s->kind = SECTION_CONTEXT;
                s->cc.name = strdup(ctx);
                if (!s->cc.name)
                        return parser_oom(p);
                r = str_index_put(&p->context_names, s->cc.name, p->n_contexts - 1, &first);
                if (r < 0)
                        return parser_oom(p);
                if (r > 0)
                        return parser_fail(p, -EINVAL, "%s:%u: [%s] defined again (first at %s:%u)", p->file, p->line,
                                           title, p->contexts[first]->cc.source.file,
                                           p->contexts[first]->cc.source.line);
        } else
                return parser_fail(p, -EINVAL, "%s:%u: unknown section [%s] (expected %s)", p->file, p->line,
                                   value_shorten(title, shown),
                                   p->in_contexts_dir ? "[context:NAME]"
                                                      : "[supervisor], [defaults] or [context:NAME]");

        s->cc.source.file = strdup(p->file);
        if (!s->cc.source.file)
                return parser_oom(p);
        s->cc.source.line = p->line;
        p->section = s;
        return 0;
}

/* Sorts the line the way inih's ini_parse_stream() will (same order of tests), acting on section headers and
 * refusing what inih would refuse, so that each error is reported here with its own words and line. */
static int parser_classify_line(Parser *p, const char *line) {
        const char *start = line, *end;

        p->continuation = false;
        if (p->line == 1 && strncmp(start, "\xef\xbb\xbf", 3) == 0)
                start += 3;
        while (isspace((unsigned char) *start))
                start++;
        if (*start == '\0' || *start == ';' || *start == '#')
                return 0;
        if (p->last_key && start > line) {
                p->continuation = true;
                return 0;
        }
        if (*start == '[') {
                end = find_chars_or_comment(start + 1, "]");
                if (*end != ']')
                        return parser_fail(p, -EINVAL, "%s:%u: unterminated section header (no ']')", p->file,
                                           p->line);
                return parser_begin_section(p, start + 1, (size_t) (end - start - 1));
        }
        end = find_chars_or_comment(start, "=:");
        if (*end != '=' && *end != ':')
                return parser_fail(p, -EINVAL, "%s:%u: expected \"key = value\", a [section] or a comment", p->file,
                                   p->line);
        return 0;
}

/* inih's line reader: like fgets(), but from our buffer, and the place every line passes through first. */
static char *parser_read_line(char *buf, int size, void *userdata) {
        Parser *p = userdata;
        const char *s, *nl;
        size_t len;

        if (p->r < 0 || p->pos >= p->size)
                return NULL;
        s = p->data + p->pos;
        nl = memchr(s, '\n', p->size - p->pos);
        len = nl ? (size_t) (nl - s) : p->size - p->pos;
        p->pos += len + (nl ? 1 : 0);
        p->line++;

        if (memchr(s, '\0', len)) {
                parser_fail(p, -EINVAL, "%s:%u: contains a NUL byte", p->file, p->line);
                return NULL;
        }
        /* inih has a fixed buffer; a longer line would be cut, and its rest read as a line of its own. */
        if (size < 1 || len > (size_t) size - 1) {
                parser_fail(p, -EINVAL, "%s:%u: line too long (at most %d characters)", p->file, p->line,
                            size < 1 ? 0 : size - 1);
                return NULL;
        }
        memcpy(buf, s, len);
        buf[len] = '\0';
        if (parser_classify_line(p, buf) < 0)
                return NULL;
        return buf;
}

/* An indented line under a key continues its value, so a key that was merely indented would be swallowed into the
 * previous value (argv would gain the words "restart", "=", "no"). Say so instead. */
static const ConfigKey *continuation_looks_like_key(const Section *s, const char *text) {
        char name[32];
        size_t n = strspn(text, "abcdefghijklmnopqrstuvwxyz_");
        const char *e = text + n;

        if (n == 0 || n >= sizeof name)
                return NULL;
        while (*e == ' ' || *e == '\t')
                e++;
        if (*e != '=' && *e != ':')
                return NULL;
        memcpy(name, text, n);
        name[n] = '\0';
        return config_key_find(s->kind, name);
}

static int parser_handle_key(Parser *p, const char *name, const char *value) {
        _cleanup_free_ char *text = NULL;
        char shown[VALUE_SHOWN_MAX + 4], reason_buf[128];
        const char *reason = NULL;
        const ConfigKey *k, *other;
        KeySetting *ks;
        void *base;
        int r;

        if (p->continuation) {
                /* inih r55 keeps an inline comment on a continuation line; drop it as on any other line. */
                text = strdup(value);
                if (!text)
                        return parser_oom(p);
                *(char *) find_chars_or_comment(text, NULL) = '\0';
                for (size_t n = strlen(text); n > 0 && isspace((unsigned char) text[n - 1]); n--)
                        text[n - 1] = '\0';
                value = text;
                k = p->last_key;
                if (k->type != VALUE_STRV && k->type != VALUE_ENV)
                        return parser_fail_key(p, p->file, p->line, p->section, k->key, value,
                                               "an indented line continues the value above, and only argv and env "
                                               "take more than one line");
                other = continuation_looks_like_key(p->section, value);
                if (other) {
                        snprintf(reason_buf, sizeof reason_buf,
                                 "an indented line continues the value above; remove the indentation to set %s",
                                 other->key);
                        return parser_fail_key(p, p->file, p->line, p->section, k->key, value, reason_buf);
                }
        } else {
                if (!p->section)
                        return parser_fail(p, -EINVAL, "%s:%u: %s = %s: key outside any section (put it under %s)",
                                           p->file, p->line, name, value_shorten(value, shown),
                                           p->in_contexts_dir ? "a [context:NAME]"
                                                              : "[supervisor], [defaults] or [context:NAME]");
                k = config_key_find(p->section->kind, name);
                if (!k)
                        return parser_fail_key(p, p->file, p->line, p->section, name, value, "unknown key");
        }
        ks = &p->section->keys[k - config_keys];
        if (!p->continuation && ks->line > 0 && k->type != VALUE_ENV) {
                snprintf(reason_buf, sizeof reason_buf, "already set on line %u", ks->line);
                return parser_fail_key(p, p->file, p->line, p->section, k->key, value, reason_buf);
        }

        base = p->section->kind == SECTION_SUPERVISOR ? (void *) p->config : (void *) &p->section->cc;
        r = k->parse(value, (uint8_t *) base + k->offset, &reason);
        if (r == -ENOMEM)
                return parser_oom(p);
        if (r < 0)
                return parser_fail_key(p, p->file, p->line, p->section, k->key, value, reason);

        if (ks->line == 0) {
                ks->line = p->line;
                ks->raw = strdup(value);
                if (!ks->raw)
                        return parser_oom(p);
        }
        p->last_key = k;
        return 0;
}

/* inih's handler: nonzero means success. Our own section tracking replaces its section argument, which inih cuts
 * at 49 bytes. */
static int parser_handle(void *userdata, const char *section, const char *name, const char *value) {
        Parser *p = userdata;

        if (p->r < 0)
                return 0;
        return parser_handle_key(p, name, value) >= 0;
}

static int parser_load_file(Parser *p, const char *path, bool in_contexts_dir) {
        _cleanup_free_ char *data = NULL;
        size_t size;
        int r;

        /* A file in contexts_dir is a context's whole definition, user= included: a symlink there would hand it to
         * whoever may write the link's target, so only the file itself counts. */
        r = read_file_at(AT_FDCWD, path, in_contexts_dir, CONFIG_FILE_MAX, &data, &size);
        if (r == -ELOOP)
                return parser_fail(p, r,
                                   "%s: is a symbolic link, which contexts_dir does not follow (put the file itself "
                                   "there)",
                                   path);
        if (r < 0)
                return parser_fail(p, r, "%s: %s", path, strerror(-r));

        p->file = path;
        p->in_contexts_dir = in_contexts_dir;
        p->data = data;
        p->size = size;
        p->pos = 0;
        p->line = 0;
        p->section = NULL;
        p->last_key = NULL;
        p->continuation = false;

        r = ini_parse_stream(parser_read_line, p, parser_handle, p);
        p->data = NULL;
        if (p->r < 0)
                return p->r;
        /* The reader refuses everything inih would, first; this is a safety net for a future inih. */
        if (r > 0)
                return parser_fail(p, -EINVAL, "%s:%d: syntax error", path, r);
        if (r < 0)
                return parser_oom(p);
        return 0;
}

static int ini_file_filter(const struct dirent *de) {
        size_t n = strlen(de->d_name);

        return de->d_name[0] != '.' && n > strlen(".ini") && streq(de->d_name + n - strlen(".ini"), ".ini");
}

/* Byte order, not the locale's, so the order files are read in does not depend on the environment. */
static int dirent_compare(const struct dirent **a, const struct dirent **b) {
        return strcmp((*a)->d_name, (*b)->d_name);
}

static int parser_load_dir(Parser *p, const char *dir) {
        struct dirent **list = NULL;
        bool slash = dir[0] && dir[strlen(dir) - 1] == '/';
        int n, r = 0;

        n = scandir(dir, &list, ini_file_filter, dirent_compare);
        if (n < 0) {
                if (errno == ENOENT)
                        return 0;
                r = -errno;
                return parser_fail(p, r, "%s: %s", dir, strerror(-r));
        }
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *path = NULL;

                if (r >= 0) {
                        if (asprintf(&path, "%s%s%s", dir, slash ? "" : "/", list[i]->d_name) < 0) {
                                path = NULL;
                                r = parser_oom(p);
                        } else
                                r = parser_load_file(p, path, true);
                }
                free(list[i]);
        }
        free(list);
        return r;
}

/* The value a context ends with for key i comes from the most specific section that set it. */
static const Section *parser_setter(const Parser *p, const Section *ctx, size_t i) {
        if (ctx && ctx->keys[i].line > 0)
                return ctx;
        if (p->defaults_section.keys[i].line > 0)
                return &p->defaults_section;
        return NULL;
}

/* backoff_max >= backoff_min can only be checked once both are known, after every file was read. The error is
 * reported where the more specific of the two was set. */
static int parser_check_backoff(Parser *p, const Section *s, const ContextConfig *cc) {
        const Section *from_max, *from_min, *other_from;
        char label[96], shown[VALUE_SHOWN_MAX + 4], builtin[64];
        const char *other_raw;
        size_t bad, other;

        if (cc->backoff_max >= cc->backoff_min)
                return 0;
        from_max = parser_setter(p, s, KEY_BACKOFF_MAX);
        from_min = parser_setter(p, s, KEY_BACKOFF_MIN);
        /* [defaults] was checked first, so a context that fails here set one of the two itself. */
        bad = from_max == s ? KEY_BACKOFF_MAX : KEY_BACKOFF_MIN;
        other = bad == KEY_BACKOFF_MAX ? KEY_BACKOFF_MIN : KEY_BACKOFF_MAX;
        other_from = other == KEY_BACKOFF_MAX ? from_max : from_min;
        if (other_from)
                other_raw = other_from->keys[other].raw;
        else {
                ContextConfig builtins;

                context_config_init(&builtins);
                other_raw = format_duration(builtin, sizeof builtin,
                                            other == KEY_BACKOFF_MAX ? builtins.backoff_max : builtins.backoff_min);
        }
        return parser_fail(p, -EINVAL, "%s:%u: [%s] %s = %s: must not be %s than %s (%s)", s->cc.source.file,
                           s->keys[bad].line, section_label(s, label, sizeof label), config_keys[bad].key,
                           value_shorten(s->keys[bad].raw, shown), bad == KEY_BACKOFF_MAX ? "less" : "greater",
                           config_keys[other].key, other_raw);
}

/* With ipc the kernel's sockets are paths below runtime_dir, and a Unix socket path has at most 107 bytes: said
 * now, where transport was set (or at the context's header for the default), rather than at every launch. */
static int parser_check_ipc_path(Parser *p, const Section *s, const ContextConfig *cc) {
        _cleanup_free_ char *path = NULL, *reason = NULL;
        const Section *from;
        char label[96];
        size_t n;

        if (cc->transport != TRANSPORT_IPC)
                return 0;
        path = ipc_socket_path(p->config->runtime_dir, cc->name, CHANNEL_HB);
        if (!path)
                return parser_oom(p);
        n = strlen(path);
        if (n <= UNIX_PATH_MAX_LEN)
                return 0;
        if (asprintf(&reason,
                     "its sockets' paths (%s) would be %zu bytes, over the %d of a Unix socket address; shorten "
                     "runtime_dir or the context's name, or set transport = tcp",
                     path, n, UNIX_PATH_MAX_LEN) < 0)
                return parser_oom(p);
        from = parser_setter(p, s, KEY_TRANSPORT);
        if (from)
                return parser_fail_key(p, from->cc.source.file, from->keys[KEY_TRANSPORT].line, from, "transport",
                                       from->keys[KEY_TRANSPORT].raw, reason);
        return parser_fail(p, -EINVAL, "%s:%u: [%s]: transport is ipc (the default): %s", s->cc.source.file,
                           s->cc.source.line, section_label(s, label, sizeof label), reason);
}

const char *argv_python_module(char *const *argv) {
        if (!argv || !argv[0] || argv[0][0] != '/' || !argv[1] || !streq(argv[1], "-m") || !argv[2] || !argv[2][0] ||
            argv[2][0] == '-')
                return NULL;
        return argv[2];
}

const char *context_config_preload_module(const ContextConfig *cc, const char **ret_why) {
        const char *module = argv_python_module(cc->argv);

        if (cc->preload == PRELOAD_NO)
                *ret_why = "preload = no";
        else if (!module)
                *ret_why = "argv is not PYTHON -m MODULE";
        else if (cc->preload == PRELOAD_AUTO && !streq(module, "ipykernel_launcher") && !streq(module, "ipykernel"))
                *ret_why = "preload = auto, and argv runs another module than ipykernel_launcher";
        else
                return module;
        return NULL;
}

/* preload = yes is a promise about argv: said where it was set, rather than as a cold start at every launch. */
static int parser_check_preload(Parser *p, const Section *s, const ContextConfig *cc) {
        const Section *from;

        if (cc->preload != PRELOAD_YES || argv_python_module(cc->argv))
                return 0;
        from = parser_setter(p, s, KEY_PRELOAD);
        return parser_fail_key(p, from->cc.source.file, from->keys[KEY_PRELOAD].line, from, "preload",
                               from->keys[KEY_PRELOAD].raw,
                               "argv must then be an absolute interpreter, -m and a module (PYTHON -m MODULE ...)");
}

static size_t placeholders_expand_into(char *out, const char *s, const char *kernel_file, const char *name) {
        size_t n = 0;

        while (*s) {
                const char *sub = NULL;
                size_t skip = 0;

                if (kernel_file && strncmp(s, "{kernel_file}", strlen("{kernel_file}")) == 0) {
                        sub = kernel_file;
                        skip = strlen("{kernel_file}");
                } else if (name && strncmp(s, "{name}", strlen("{name}")) == 0) {
                        sub = name;
                        skip = strlen("{name}");
                }
                if (sub) {
                        if (out)
                                memcpy(out + n, sub, strlen(sub));
                        n += strlen(sub);
                        s += skip;
                } else {
                        if (out)
                                out[n] = *s;
                        n++;
                        s++;
                }
        }
        if (out)
                out[n] = '\0';
        return n;
}

/* Replaces {kernel_file} (when kernel_file is not NULL) and {name}; substituted text is not scanned again. */
static char *placeholders_expand(const char *s, const char *kernel_file, const char *name) {
        char *out = malloc(placeholders_expand_into(NULL, s, kernel_file, name) + 1);

        if (out)
                placeholders_expand_into(out, s, kernel_file, name);
        return out;
}

/* Builds the effective settings of the context section s into *ret (which the caller frees, also on failure). */
static int parser_resolve_context(Parser *p, const Section *s, ContextConfig *ret) {
        const Section *from;
        int r;

        context_config_init(ret);
        ret->name = strdup(s->cc.name);
        ret->source.file = strdup(s->cc.source.file);
        if (!ret->name || !ret->source.file)
                return -ENOMEM;
        ret->source.line = s->cc.source.line;

        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                const ConfigKey *k = &config_keys[i];
                uint8_t *dst = (uint8_t *) ret + k->offset;
                const uint8_t *src;

                if (k->section != SECTION_CONTEXT || k->type == VALUE_ENV)
                        continue;
                from = parser_setter(p, s, i);
                if (!from)
                        continue;
                src = (const uint8_t *) &from->cc + k->offset;
                if (k->type == VALUE_STRING) {
                        *(char **) dst = strdup(*(char *const *) src);
                        if (!*(char **) dst)
                                return -ENOMEM;
                } else if (k->type == VALUE_STRV) {
                        r = strv_copy(*(char **const *) src, (char ***) dst);
                        if (r < 0)
                                return r;
                } else
                        memcpy(dst, src, value_size(k->type));
        }

        /* The environment merges: [defaults]' variables, then the context's, which replace same-named ones. */
        r = strv_copy(p->defaults_section.cc.env, &ret->env);
        if (r < 0)
                return r;
        for (size_t i = 0; s->cc.env && s->cc.env[i]; i++) {
                r = env_set(&ret->env, s->cc.env[i]);
                if (r < 0)
                        return r;
        }

        if (!ret->argv) {
                const char *reason;

                r = argv_split(DEFAULT_ARGV, &ret->argv, &reason);
                if (r < 0)
                        return r;
        }
        if (ret->connection_file) {
                /* {name} lets one connection_file in [defaults] serve every context. */
                _cleanup_free_ char *f = placeholders_expand(ret->connection_file, NULL, ret->name);

                if (!f)
                        return -ENOMEM;
                free(ret->connection_file);
                ret->connection_file = NULL;
                /* One spelling per file, so that ".." cannot hide a path from the checks below. */
                r = path_normalize(f, &ret->connection_file);
                if (r < 0)
                        return r;
        } else if (asprintf(&ret->connection_file, "%s/connections/%s.json", p->config->runtime_dir, ret->name) < 0) {
                ret->connection_file = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* The daemon's own places, each as written and as realpath() finds it now (they are root's: a link among them is
 * the administrator's). A published file may lie in <runtime_dir>/connections; nowhere else below them. */
typedef struct OwnPath {
        const char *key;  /* the [supervisor] key that names it */
        char *path;       /* normalized */
        bool just_itself; /* a file (the config, the socket), not a directory */
} OwnPath;

#define OWN_PATHS_MAX 12

static int own_path_add(OwnPath *v, size_t *n, const char *key, const char *path, bool just_itself) {
        char *real;
        int r;

        r = path_normalize(path, &v[*n].path);
        if (r < 0)
                return r == -EINVAL ? 0 : r; /* a relative path (a test's config) names no place of ours here */
        v[*n].key = key;
        v[*n].just_itself = just_itself;
        (*n)++;
        real = realpath(path, NULL);
        if (!real)
                return 0;
        v[*n] = (OwnPath){ .key = key, .path = real, .just_itself = just_itself };
        (*n)++;
        return 0;
}

static void own_paths_free(OwnPath *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].path);
}

static int own_paths_collect(const Config *c, OwnPath v[static OWN_PATHS_MAX], size_t *ret_n,
                             OwnPath published[static 2], size_t *ret_n_published) {
        _cleanup_free_ char *conn = NULL;
        size_t n = 0, np = 0;
        int r;

        if (asprintf(&conn, "%s/connections", c->runtime_dir) < 0)
                return -ENOMEM;
        r = own_path_add(published, &np, "runtime_dir", conn, false);
        if (r >= 0)
                r = own_path_add(v, &n, "the configuration file", c->path, true);
        if (r >= 0)
                r = own_path_add(v, &n, "the control socket", c->socket_path, true);
        if (r >= 0)
                r = own_path_add(v, &n, "contexts_dir", c->contexts_dir, false);
        if (r >= 0)
                r = own_path_add(v, &n, "state_dir", c->state_dir, false);
        if (r >= 0)
                r = own_path_add(v, &n, "runtime_dir", c->runtime_dir, false);
        *ret_n = n;
        *ret_n_published = np;
        return r;
}

static const OwnPath *own_path_holding(const OwnPath *v, size_t n, const char *path) {
        for (size_t i = 0; i < n; i++)
                if (v[i].just_itself ? streq(path, v[i].path) : path_is_below(path, v[i].path))
                        return &v[i];
        return NULL;
}

/* A connection file is written over whatever is at its path: never onto the daemon's own files (its config, its
 * state, the kernels' private files), which would break every later start. The daemon's published files live in
 * <runtime_dir>/connections, which is allowed. Links need no resolving here: no component of a published path may
 * be one when it is written, and following a user's link now would let that user get the whole configuration
 * refused. */
static int parser_check_own_paths(Parser *p, ContextConfig *ccs) {
        OwnPath own[OWN_PATHS_MAX] = {}, published[2] = {};
        size_t n_own = 0, n_published = 0;
        char label[96], shown[VALUE_SHOWN_MAX + 4];
        int r;

        r = own_paths_collect(p->config, own, &n_own, published, &n_published);
        for (size_t i = 0; r >= 0 && i < p->n_contexts; i++) {
                const OwnPath *o;
                const Section *from;

                ccs[i].connection_file_published = own_path_holding(published, n_published, ccs[i].connection_file);
                if (ccs[i].connection_file_published)
                        continue;
                o = own_path_holding(own, n_own, ccs[i].connection_file);
                if (!o)
                        continue;
                from = parser_setter(p, p->contexts[i], KEY_CONNECTION_FILE);
                if (!from) /* the default path: only a runtime_dir set inside contexts_dir or state_dir gets here */
                        from = p->contexts[i];
                r = parser_fail(p, -EINVAL,
                                "%s:%u: [%s] connection_file = %s: %s is %s%s %s, the daemon's own; "
                                "connection files go elsewhere (or in %s/connections)",
                                from->cc.source.file, from->keys[KEY_CONNECTION_FILE].line ?: from->cc.source.line,
                                section_label(from, label, sizeof label),
                                value_shorten(from->keys[KEY_CONNECTION_FILE].raw ?: ccs[i].connection_file, shown),
                                ccs[i].connection_file, o->just_itself ? "" : "inside ", o->key, o->path,
                                p->config->runtime_dir);
        }
        own_paths_free(own, n_own);
        own_paths_free(published, n_published);
        if (r == -ENOMEM)
                return parser_oom(p);
        return r;
}

/* Each kernel keeps PORTS_PER_KERNEL ports of port_range for good: a range too small fails kernels one by one at
 * run time, so say so now. */
static int parser_check_port_capacity(Parser *p) {
        const KeySetting *ks = &p->supervisor.keys[KEY_PORT_RANGE];
        size_t need = p->n_contexts * PORTS_PER_KERNEL, have = (size_t) p->config->port_max - p->config->port_min + 1;

        if (need <= have)
                return 0;
        if (ks->line > 0)
                return parser_fail(
                        p, -EINVAL,
                        "%s:%u: [supervisor] port_range = %s: holds %zu ports, but the %zu contexts need %zu "
                        "(%d each)",
                        p->supervisor.cc.source.file, ks->line, ks->raw, have, p->n_contexts, need, PORTS_PER_KERNEL);
        return parser_fail(
                p, -EINVAL,
                "%s: [supervisor] port_range (default %d-%d) holds %zu ports, but the %zu contexts need %zu "
                "(%d each): set a wider port_range",
                p->config->path, DEFAULT_PORT_MIN, DEFAULT_PORT_MAX, have, p->n_contexts, need, PORTS_PER_KERNEL);
}

/* Two kernels writing one connection file would hand clients each other's ports and keys. */
static int parser_check_connection_files(Parser *p, const ContextConfig *ccs) {
        char label[96], shown[VALUE_SHOWN_MAX + 4];
        _cleanup_(str_index_done) StrIndex seen = {};

        for (size_t i = 0; i < p->n_contexts; i++) {
                const Section *s, *from;
                size_t j, named;
                int r;

                r = str_index_put(&seen, ccs[i].connection_file, i, &j);
                if (r < 0)
                        return parser_oom(p);
                if (r == 0)
                        continue;
                /* At least one of the two was set explicitly: default paths differ by name. */
                named = parser_setter(p, p->contexts[i], KEY_CONNECTION_FILE) ? i : j;
                s = p->contexts[named];
                from = parser_setter(p, s, KEY_CONNECTION_FILE);
                return parser_fail(p, -EINVAL, "%s:%u: [%s] connection_file = %s: contexts %s and %s would share %s",
                                   from->cc.source.file, from->keys[KEY_CONNECTION_FILE].line,
                                   section_label(from, label, sizeof label),
                                   value_shorten(from->keys[KEY_CONNECTION_FILE].raw, shown), ccs[j].name, ccs[i].name,
                                   ccs[i].connection_file);
        }
        return 0;
}

static int context_config_compare(const void *a, const void *b) {
        return strcmp(((const ContextConfig *) a)->name, ((const ContextConfig *) b)->name);
}

static int parser_resolve(Parser *p) {
        const ConfigDefaults *d = p->defaults;
        Config *c = p->config;
        ContextConfig builtins_and_defaults;
        int r;

        if (!c->runtime_dir && !(c->runtime_dir = strdup(d->runtime_dir)))
                return parser_oom(p);
        if (!c->state_dir && !(c->state_dir = strdup(d->state_dir)))
                return parser_oom(p);
        if (!c->contexts_dir && !(c->contexts_dir = strdup(d->contexts_dir)))
                return parser_oom(p);
        if (!c->socket_path) {
                const KeySetting *rt = &p->supervisor.keys[KEY_RUNTIME_DIR];

                /* A runtime_dir set in the file moves the socket along with it. */
                if (rt->line > 0 || !d->socket_path)
                        r = asprintf(&c->socket_path, "%s/control.sock", c->runtime_dir);
                else
                        r = (c->socket_path = strdup(d->socket_path)) ? 0 : -1;
                if (r < 0) {
                        c->socket_path = NULL;
                        return parser_oom(p);
                }
                if (rt->line > 0 && strlen(c->socket_path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                        return parser_fail_key(p, p->supervisor.cc.source.file, rt->line, &p->supervisor,
                                               "runtime_dir", rt->raw,
                                               "too long to hold control.sock (a Unix socket path has at most 107 "
                                               "bytes); set socket too");
        }
        if (p->supervisor.keys[KEY_PORT_RANGE].line == 0) {
                c->port_min = DEFAULT_PORT_MIN;
                c->port_max = DEFAULT_PORT_MAX;
        }

        context_config_init(&builtins_and_defaults);
        if (p->defaults_section.keys[KEY_BACKOFF_MIN].line > 0)
                builtins_and_defaults.backoff_min = p->defaults_section.cc.backoff_min;
        if (p->defaults_section.keys[KEY_BACKOFF_MAX].line > 0)
                builtins_and_defaults.backoff_max = p->defaults_section.cc.backoff_max;
        r = parser_check_backoff(p, &p->defaults_section, &builtins_and_defaults);
        if (r < 0)
                return r;

        if (p->n_contexts == 0)
                return 0;
        c->contexts = calloc(p->n_contexts, sizeof(ContextConfig));
        if (!c->contexts)
                return parser_oom(p);
        c->n_contexts = p->n_contexts;
        /* In definition order first, so that the first error found is the first in the files. */
        for (size_t i = 0; i < p->n_contexts; i++) {
                r = parser_resolve_context(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return parser_oom(p);
                r = parser_check_backoff(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
                r = parser_check_ipc_path(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
                r = parser_check_preload(p, p->contexts[i], &c->contexts[i]);
                if (r < 0)
                        return r;
        }
        r = parser_check_connection_files(p, c->contexts);
        if (r < 0)
                return r;
        r = parser_check_own_paths(p, c->contexts);
        if (r < 0)
                return r;
        r = parser_check_port_capacity(p);
        if (r < 0)
                return r;
        qsort(c->contexts, c->n_contexts, sizeof(ContextConfig), context_config_compare);
        return 0;
}

int config_load(const char *path, const ConfigDefaults *defaults, Config **ret, char **ret_error) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_(parser_done) Parser p = {
                .defaults = defaults,
                .supervisor.kind = SECTION_SUPERVISOR,
                .defaults_section.kind = SECTION_DEFAULTS,
        };
        int r;

        if (!path || !defaults || !defaults->runtime_dir || !defaults->state_dir || !defaults->contexts_dir || !ret)
                return -EINVAL;

        c = calloc(1, sizeof(Config));
        if (!c || !(c->path = strdup(path)))
                return -ENOMEM;
        p.config = c;

        r = parser_load_file(&p, path, false);
        if (r >= 0)
                r = parser_load_dir(&p, c->contexts_dir ? c->contexts_dir : defaults->contexts_dir);
        if (r >= 0)
                r = parser_resolve(&p);
        if (r < 0) {
                if (ret_error)
                        *ret_error = TAKE_PTR(p.error);
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int config_value_writable(const char *key, const char *value, size_t len, const char **ret_reason) {
        _cleanup_free_ char *after_eq = NULL;

        if (len != strlen(value)) {
                *ret_reason = "contains a NUL byte";
                return -EINVAL;
        }
        if (len == 0) {
                *ret_reason = "is empty";
                return -EINVAL;
        }
        if (strpbrk(value, "\r\n")) {
                *ret_reason = "contains a line break";
                return -EINVAL;
        }
        if (isspace((unsigned char) value[0]) || isspace((unsigned char) value[len - 1])) {
                *ret_reason = "starts or ends with a blank, which the INI reader trims";
                return -EINVAL;
        }
        /* inih's buffer holds INI_MAX_LINE bytes with the NUL; parser_read_line refuses longer lines. */
        if (strlen(key) + strlen(" = ") + len > INI_MAX_LINE - 1) {
                *ret_reason = "is too long for one line of an INI file (at most 199 bytes with the key and \" = \")";
                return -EINVAL;
        }
        /* The text after '=' as inih scans it, the blank we write included. */
        if (asprintf(&after_eq, " %s", value) < 0)
                return -ENOMEM;
        if (*find_chars_or_comment(after_eq, NULL) != '\0') {
                *ret_reason = "holds a ';' after a blank, which starts a comment in an INI file";
                return -EINVAL;
        }
        return 0;
}

Config *config_free(Config *c) {
        if (!c)
                return NULL;
        free(c->path);
        free(c->socket_path);
        free(c->runtime_dir);
        free(c->state_dir);
        free(c->contexts_dir);
        for (size_t i = 0; i < c->n_contexts; i++)
                context_config_done(&c->contexts[i]);
        free(c->contexts);
        free(c);
        return NULL;
}

static const char *const restart_policy_table[_RESTART_POLICY_MAX] = {
        [RESTART_ALWAYS] = "always",
        [RESTART_ON_FAILURE] = "on-failure",
        [RESTART_NO] = "no",
};

const char *restart_policy_to_string(RestartPolicy p) {
        if ((unsigned) p >= _RESTART_POLICY_MAX)
                return NULL;
        return restart_policy_table[p];
}

int restart_policy_from_string(const char *s) {
        for (int i = 0; s && i < _RESTART_POLICY_MAX; i++)
                if (streq(restart_policy_table[i], s))
                        return i;
        return -EINVAL;
}

static int context_config_compare_name(const void *key, const void *elem) {
        return strcmp(key, ((const ContextConfig *) elem)->name);
}

const ContextConfig *config_find_context(const Config *c, const char *name) {
        if (!c || !name || c->n_contexts == 0)
                return NULL;
        return bsearch(name, c->contexts, c->n_contexts, sizeof(ContextConfig), context_config_compare_name);
}

int context_config_expand_argv(const ContextConfig *cc, const char *kernel_file, char ***ret) {
        _cleanup_strv_free_ char **v = NULL;
        size_t n;

        if (!cc || !cc->argv || !kernel_file || !ret)
                return -EINVAL;
        n = strv_length(cc->argv);
        v = calloc(n + 1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                v[i] = placeholders_expand(cc->argv[i], kernel_file, cc->name);
                if (!v[i])
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

/* The environment as a set: after merging each name appears once, and the order of variables does not change
 * what the kernel sees, so a reordered file does not cost anyone their kernel's namespace. */
static bool env_equal(char *const *a, char *const *b) {
        size_t n = strv_length(a);

        if (n != strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++) {
                bool found = false;

                for (size_t j = 0; j < n && !found; j++)
                        found = streq(a[i], b[j]);
                if (!found)
                        return false;
        }
        return true;
}

const char *context_config_process_change(const ContextConfig *a, const ContextConfig *b) {
        if (!strv_equal(a->argv, b->argv))
                return "argv";
        if (!streq_ptr(a->user, b->user))
                return "user";
        if (!streq_ptr(a->group, b->group))
                return "group";
        if (!streq_ptr(a->cwd, b->cwd))
                return "cwd";
        if (!env_equal(a->env, b->env))
                return "env";
        if (!streq_ptr(a->connection_file, b->connection_file))
                return "connection_file";
        /* The kernel binds its sockets once, at start. */
        if (a->transport != b->transport)
                return "transport";
        /* Limits are set when the kernel is placed in its cgroup, before it runs. */
        if (a->memory_max != b->memory_max)
                return "memory_max";
        if (a->cpu_quota != b->cpu_quota)
                return "cpu_quota";
        if (a->tasks_max != b->tasks_max)
                return "tasks_max";
        return NULL;
}

bool context_config_process_differs(const ContextConfig *a, const ContextConfig *b) {
        return context_config_process_change(a, b) != NULL;
}

const char *context_config_setting_change(const ContextConfig *a, const ContextConfig *b) {
        /* Every key of the table that does not shape the process: compared by its stored value. */
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                const ConfigKey *k = &config_keys[i];
                size_t size = value_size(k->type);
                if (k->section != SECTION_CONTEXT || size == 0)
                        continue;
                if (memcmp((const char *) a + k->offset, (const char *) b + k->offset, size) != 0)
                        return k->key;
        }
        return NULL;
}

ContextConfig *context_config_dup(const ContextConfig *cc) {
        ContextConfig *d = calloc(1, sizeof *d);

        if (!d)
                return NULL;
        *d = *cc;
        d->name = d->source.file = d->connection_file = d->user = d->group = d->cwd = NULL;
        d->argv = d->env = NULL;
        if (!(d->name = strdup(cc->name)) || (cc->source.file && !(d->source.file = strdup(cc->source.file))) ||
            (cc->connection_file && !(d->connection_file = strdup(cc->connection_file))) ||
            (cc->user && !(d->user = strdup(cc->user))) || (cc->group && !(d->group = strdup(cc->group))) ||
            (cc->cwd && !(d->cwd = strdup(cc->cwd))) || strv_copy(cc->argv, &d->argv) < 0 ||
            strv_copy(cc->env, &d->env) < 0)
                return context_config_free(d);
        return d;
}

ContextConfig *context_config_free(ContextConfig *cc) {
        if (cc) {
                context_config_done(cc);
                free(cc);
        }
        return NULL;
}

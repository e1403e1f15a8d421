/* Inside the configuration loader: the key table, sections and the parser state shared by config.c (reading
 * the files) and config-resolve.c (resolving every context from built-in defaults, [defaults] and its own keys,
 * and the checks across contexts). Not for use outside those two files. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config-value.h"
#include "config.h"
#include "util.h"

/* Values quoted in error messages are cut to this many bytes. */
#define VALUE_SHOWN_MAX 80

/* History in memory: a user's kernels share HOME/.ipython/profile_default/history.sqlite otherwise, and a
 * kernel that finds it locked prints a warning into a cell's output. */
#define DEFAULT_ARGV "/usr/bin/python3 -m ipykernel_launcher -f {kernel_file} --HistoryManager.hist_file=:memory:"
/* The kernel a context runs when neither kernel nor argv is set. */
#define NATIVE_KERNEL "python3"
#define DEFAULT_PORT_MIN 20000
#define DEFAULT_PORT_MAX 32000
/* Every uid may connect: the daemon shows and lets each drive only its own contexts (handlers_peer_sees()). */
#define DEFAULT_SOCKET_MODE 0666
/* The contexts one uid other than root may add with kernelctl add (handlers-add.c). */
#define DEFAULT_USER_CONTEXTS_MAX 8

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
        VALUE_RESTORE,
        VALUE_MODE,
} ValueType;

typedef struct ConfigKey {
        SectionKind section; /* SECTION_SUPERVISOR, or SECTION_CONTEXT for [defaults] and [context:NAME] alike */
        const char *key;
        ValueParser parse;
        size_t offset; /* into Config for [supervisor], into ContextConfig otherwise */
        ValueType type;
} ConfigKey;

enum {
        KEY_SOCKET,
        KEY_SOCKET_MODE,
        KEY_SOCKET_USER,
        KEY_SOCKET_GROUP,
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
        KEY_OUTPUT_CHUNKING,
        KEY_PRELOAD,
        KEY_KERNEL,
        KEY_RESTORE,
        KEY_JOURNAL_MAX,
        KEY_RESTORE_TIMEOUT,
        KEY_EXECUTIONS_MEMORY,
        KEY_EXECUTIONS_KEEP,
        KEY_EXECUTIONS_TTL,
        KEY_USER_CONTEXTS_MAX,
        KEY_ADDED_BY,
        _KEY_MAX,
};

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

extern const ConfigKey config_keys[_KEY_MAX];

/* config-keys.c */
/* The key of that name in a section of that kind ([defaults] has a context's keys), or NULL. */
const ConfigKey *config_key_find(SectionKind kind, const char *key);
void context_config_done(ContextConfig *cc);
void parser_done(Parser *p);
/* Records the first error. Returns r, so callers can "return parser_fail(...)". */
_printf_(3, 4) int parser_fail(Parser *p, int r, const char *fmt, ...);
size_t value_size(ValueType t);
void context_config_init(ContextConfig *cc);
const char *section_label(const Section *s, char *buf, size_t size);
int parser_oom(Parser *p);
const char *value_shorten(const char *value, char buf[static VALUE_SHOWN_MAX + 4]);
int parser_fail_key(Parser *p, const char *file, unsigned line, const Section *s, const char *key, const char *value,
                    const char *reason);

/* config-resolve.c */
char *placeholders_expand(const char *s, const char *kernel_file, const char *name);
int parser_resolve(Parser *p);

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

#include "config-value.h"
#include "config-private.h"
#include "config.h"
#include "util.h"

/* Configuration files are small; this only bounds what a mistake (a log file named *.ini) can cost. */
#define CONFIG_FILE_MAX (1024 * 1024)

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
                /* Whose context it is to remove: the daemon's word in the file it wrote, not a setting. */
                if (k == &config_keys[KEY_ADDED_BY] && !p->in_contexts_dir)
                        return parser_fail_key(p, p->file, p->line, p->section, name, value,
                                               "only in a file of contexts_dir, where kernelctl add records who "
                                               "added the context");
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
        free(c->socket_user);
        free(c->socket_group);
        free(c->runtime_dir);
        free(c->state_dir);
        free(c->contexts_dir);
        context_config_done(&c->defaults);
        for (size_t i = 0; i < c->n_contexts; i++)
                context_config_done(&c->contexts[i]);
        free(c->contexts);
        free(c);
        return NULL;
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
        /* A kernelspec that became usable, or stopped being so: the kernel starts again, or fails. */
        if (!streq_ptr(a->kernel_error, b->kernel_error))
                return "kernel";
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
        /* A kernelspec whose argv and env stayed the same: its name, language or interrupt_mode apply at once. */
        if (!streq_ptr(a->kernel, b->kernel) || !streq_ptr(a->language, b->language) ||
            !streq_ptr(a->kernel_path, b->kernel_path) || a->interrupt_mode != b->interrupt_mode)
                return "kernel";
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
        d->kernel = d->kernel_path = d->language = d->kernel_error = NULL;
        if ((cc->kernel && !(d->kernel = strdup(cc->kernel))) ||
            (cc->kernel_path && !(d->kernel_path = strdup(cc->kernel_path))) ||
            (cc->kernel_error && !(d->kernel_error = strdup(cc->kernel_error))) ||
            (cc->language && !(d->language = strdup(cc->language))))
                return context_config_free(d);
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

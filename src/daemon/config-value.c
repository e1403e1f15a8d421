/* The parsers of single configuration values, and the names of restart policies: see config-value.h. */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/un.h>

#include "config-value.h"
#include "config.h"
#include "util.h"

int parse_absolute_path(const char *value, void *data, const char **ret_reason) {
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

int parse_socket_path(const char *value, void *data, const char **ret_reason) {
        if (value[0] == '/' && strlen(value) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
                *ret_reason = "too long for a Unix socket (at most 107 bytes)";
                return -EINVAL;
        }
        return parse_absolute_path(value, data, ret_reason);
}

/* An octal mode of the permission bits only, as chmod(1) takes it: "0666", "660". The setuid, setgid and sticky bits
 * mean nothing on a socket, so a mode with them is a mistake to say. */
int parse_socket_mode(const char *value, void *data, const char **ret_reason) {
        size_t n = strspn(value, "01234567");
        unsigned long m;

        if (n == 0 || value[n] != '\0' || n > 4) {
                *ret_reason = "expected an octal mode such as 0666 (digits 0-7)";
                return -EINVAL;
        }
        m = strtoul(value, NULL, 8);
        if (m > 0777) {
                *ret_reason = "only the permission bits (at most 0777): setuid, setgid and sticky mean nothing on a "
                              "socket";
                return -EINVAL;
        }
        *(mode_t *) data = (mode_t) m;
        return 0;
}

/* "MIN-MAX" into two adjacent uint16_t (Config's port_min and port_max). */
int parse_port_range(const char *value, void *data, const char **ret_reason) {
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
int argv_split(const char *s, char ***ret, const char **ret_reason) {
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
int parse_argv(const char *value, void *data, const char **ret_reason) {
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

int parse_restart(const char *value, void *data, const char **ret_reason) {
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
int parse_user_name(const char *value, void *data, const char **ret_reason) {
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

int parse_env(const char *value, void *data, const char **ret_reason) {
        const char *eq = strchr(value, '=');

        if (!eq) {
                *ret_reason = "expected NAME=VALUE";
                return -EINVAL;
        }
        if (!env_name_valid(value, (size_t) (eq - value))) {
                *ret_reason = "invalid variable name (expected [A-Za-z_][A-Za-z0-9_]*)";
                return -EINVAL;
        }
        return strv_env_set_copy(data, value);
}

int parse_bool(const char *value, void *data, const char **ret_reason) {
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
int parse_duration_positive(const char *value, void *data, const char **ret_reason) {
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
int parse_duration_or_no(const char *value, void *data, const char **ret_reason) {
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

/* A memory limit: bytes with an optional K, M, G or T suffix (powers of 1024), at least 1M; or "none" (0). */
int parse_memory(const char *value, void *data, const char **ret_reason) {
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
int parse_cpu_quota(const char *value, void *data, const char **ret_reason) {
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

int parse_tasks(const char *value, void *data, const char **ret_reason) {
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

int parse_transport(const char *value, void *data, const char **ret_reason) {
        int t = streq(value, "auto") ? (int) TRANSPORT_AUTO : transport_from_string(value);

        if (t < 0) {
                *ret_reason = "expected auto, ipc or tcp";
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

int parse_preload(const char *value, void *data, const char **ret_reason) {
        for (Preload p = 0; p < _PRELOAD_MAX; p++)
                if (streq(value, preload_names[p])) {
                        *(Preload *) data = p;
                        return 0;
                }
        *ret_reason = "expected auto, yes or no";
        return -EINVAL;
}

int parse_kernel_name(const char *value, void *data, const char **ret_reason) {
        char *s;

        if (!kernelspec_name_valid(value)) {
                *ret_reason = "expected a kernelspec name (1 to 64 letters, digits, '.', '_' or '-')";
                return -EINVAL;
        }
        s = strdup(value);
        if (!s)
                return -ENOMEM;
        for (char *c = s; *c; c++)
                *c = (char) tolower((unsigned char) *c);
        *(char **) data = s;
        return 0;
}

static const char *const restore_names[_RESTORE_MAX] = {
        [RESTORE_NONE] = "none",
        [RESTORE_REPLAY] = "replay",
};

const char *restore_to_string(Restore r) {
        return r >= 0 && r < _RESTORE_MAX ? restore_names[r] : NULL;
}

int parse_restore(const char *value, void *data, const char **ret_reason) {
        for (Restore r = 0; r < _RESTORE_MAX; r++)
                if (streq(value, restore_names[r])) {
                        *(Restore *) data = r;
                        return 0;
                }
        *ret_reason = "expected none or replay";
        return -EINVAL;
}

int parse_count_or_zero(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;

        if (parse_uint(value, 0, 1000, &v) < 0) {
                *ret_reason = "expected a number from 0 to 1000";
                return -EINVAL;
        }
        *(unsigned *) data = (unsigned) v;
        return 0;
}

int parse_uid(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;

        if (parse_uint(value, 0, UINT32_MAX - 1, &v) < 0) {
                *ret_reason = "expected a uid (a number)";
                return -EINVAL;
        }
        *(uid_t *) data = (uid_t) v;
        return 0;
}

int parse_count(const char *value, void *data, const char **ret_reason) {
        unsigned long long v;

        if (parse_uint(value, 1, 1000, &v) < 0) {
                *ret_reason = "expected a number from 1 to 1000";
                return -EINVAL;
        }
        *(unsigned *) data = (unsigned) v;
        return 0;
}

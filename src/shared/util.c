#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

usec_t now_usec(clockid_t clock) {
        struct timespec ts;

        if (clock_gettime(clock, &ts) < 0)
                abort(); /* only with a bad clock id: a programming error */
        return (usec_t) ts.tv_sec * USEC_PER_SEC + (usec_t) ts.tv_nsec / 1000;
}

int parse_duration(const char *s, usec_t *ret) {
        static const struct {
                const char *suffix;
                usec_t mult;
        } units[] = {
                { "us", 1 },
                { "ms", USEC_PER_MSEC },
                { "s", USEC_PER_SEC },
                { "sec", USEC_PER_SEC },
                { "min", 60 * USEC_PER_SEC },
                { "m", 60 * USEC_PER_SEC },
                { "h", 3600 * USEC_PER_SEC },
                { "d", 86400 * USEC_PER_SEC },
                { "", USEC_PER_SEC },
        };
        char *end;
        double v;

        if (!s || !*s)
                return -EINVAL;
        if (streq(s, "infinity")) {
                *ret = USEC_INFINITY;
                return 0;
        }
        /* strtod would read hexadecimal ("0x10") too: not a duration anyone writes. */
        if (!isdigit((unsigned char) s[0]) || (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || !isfinite(v) || v < 0)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (!streq(end, units[i].suffix))
                        continue;
                double r = v * (double) units[i].mult;
                if (r >= 1.8e19)
                        return -ERANGE;
                *ret = (usec_t) llround(r);
                /* Never 0 for more than 0 ("1e-9"): a positive duration stays one. */
                if (*ret == 0 && r > 0)
                        *ret = 1;
                return 0;
        }
        return -EINVAL;
}

char *format_duration(char *buf, size_t size, usec_t u) {
        if (u == USEC_INFINITY)
                snprintf(buf, size, "infinity");
        else if (u < USEC_PER_SEC)
                snprintf(buf, size, "%llums", u / USEC_PER_MSEC);
        else if (u < 60 * USEC_PER_SEC)
                snprintf(buf, size, "%llus", u / USEC_PER_SEC);
        else if (u < 3600 * USEC_PER_SEC)
                snprintf(buf, size, "%llumin %llus", u / (60 * USEC_PER_SEC), (u / USEC_PER_SEC) % 60);
        else if (u < 86400 * USEC_PER_SEC)
                snprintf(buf, size, "%lluh %llumin", u / (3600 * USEC_PER_SEC), (u / (60 * USEC_PER_SEC)) % 60);
        else
                snprintf(buf, size, "%llud %lluh", u / (86400 * USEC_PER_SEC), (u / (3600 * USEC_PER_SEC)) % 24);
        return buf;
}

/* ISO 8601 in UTC, with digits (3 or 6) of the second's fraction. */
static char *format_iso8601(char *buf, size_t size, usec_t t, bool micro) {
        time_t sec = (time_t) (t / USEC_PER_SEC);
        struct tm tm;
        char base[32];

        gmtime_r(&sec, &tm);
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
        if (micro)
                snprintf(buf, size, "%s.%06lluZ", base, t % USEC_PER_SEC);
        else
                snprintf(buf, size, "%s.%03lluZ", base, (t % USEC_PER_SEC) / USEC_PER_MSEC);
        return buf;
}

char *format_timestamp(char *buf, size_t size, usec_t t) {
        return format_iso8601(buf, size, t, false);
}

char *format_timestamp_usec(char *buf, size_t size, usec_t t) {
        return format_iso8601(buf, size, t, true);
}

int parse_timestamp(const char *s, usec_t *ret) {
        static const char form[] = "dddd-dd-ddTdd:dd:dd.dddZ";
        char buf[sizeof form];
        struct tm tm = {};
        unsigned msec;
        time_t sec;

        /* The form first: sscanf() alone would take signs and spaces. */
        for (size_t i = 0; i < sizeof form; i++)
                if (form[i] == 'd' ? !isdigit((unsigned char) s[i]) : s[i] != form[i])
                        return -EINVAL;
        if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3u", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                   &tm.tm_sec, &msec) != 7)
                return -EINVAL;
        if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
            tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 59)
                return -EINVAL;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        sec = timegm(&tm);
        if (sec < 0)
                return -EINVAL;
        *ret = (usec_t) sec * USEC_PER_SEC + msec * USEC_PER_MSEC;
        /* timegm() takes February 31 as March 3: only a date that exists reads back as written. */
        return streq(format_timestamp(buf, sizeof buf, *ret), s) ? 0 : -EINVAL;
}

int parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *ret) {
        char *end;
        unsigned long long v;

        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || *end != '\0')
                return -EINVAL;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* Bytes, with an optional K, M or G suffix (powers of 1024): "10M". At least 1 KiB, at most 1 GiB. */
int parse_size(const char *value, void *data, const char **ret_reason) {
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

int random_bytes(void *p, size_t n) {
        uint8_t *b = p;

        while (n > 0) {
                ssize_t k = getrandom(b, n, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                b += k;
                n -= (size_t) k;
        }
        return 0;
}

uint32_t string_hash(const char *s) {
        uint32_t h = 2166136261u;

        for (; *s; s++) {
                h ^= (uint8_t) *s;
                h *= 16777619u;
        }
        return h;
}

/* The slot of key, or of the empty place where it would go (size is a power of two, never full). */
static size_t str_index_slot(const StrIndex *m, const char *key) {
        size_t i = string_hash(key) & (m->size - 1);

        while (m->keys[i] && !streq(m->keys[i], key))
                i = (i + 1) & (m->size - 1);
        return i;
}

static int str_index_grow(StrIndex *m) {
        StrIndex bigger = { .size = m->size ? 2 * m->size : 64 };

        bigger.keys = calloc(bigger.size, sizeof(char *));
        bigger.values = calloc(bigger.size, sizeof(size_t));
        if (!bigger.keys || !bigger.values) {
                str_index_done(&bigger);
                return -ENOMEM;
        }
        for (size_t i = 0; i < m->size; i++)
                if (m->keys[i]) {
                        size_t j = str_index_slot(&bigger, m->keys[i]);
                        bigger.keys[j] = m->keys[i];
                        bigger.values[j] = m->values[i];
                }
        bigger.n = m->n;
        str_index_done(m);
        *m = bigger;
        return 0;
}

int str_index_put(StrIndex *m, const char *key, size_t value, size_t *ret_value) {
        size_t i;
        int r;

        /* At most half full, so probe runs stay short. */
        if (2 * (m->n + 1) > m->size) {
                r = str_index_grow(m);
                if (r < 0)
                        return r;
        }
        i = str_index_slot(m, key);
        if (m->keys[i]) {
                if (ret_value)
                        *ret_value = m->values[i];
                return 1;
        }
        m->keys[i] = key;
        m->values[i] = value;
        m->n++;
        return 0;
}

void str_index_done(StrIndex *m) {
        free(m->keys);
        free(m->values);
        *m = (StrIndex){};
}

void hex_encode(const void *p, size_t n, char *out) {
        static const char digits[] = "0123456789abcdef";
        const uint8_t *b = p;

        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[b[i] >> 4];
                out[2 * i + 1] = digits[b[i] & 15];
        }
        out[2 * n] = '\0';
}

int hex_digit_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int hex_decode(const char *s, void *out, size_t n) {
        uint8_t *b = out;

        if (strlen(s) != 2 * n)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                int hi = hex_digit_value(s[2 * i]), lo = hex_digit_value(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        return -EINVAL;
                b[i] = (uint8_t) (hi << 4 | lo);
        }
        return 0;
}

void uuid_random(char out[37]) {
        uint8_t u[16];
        char hex[33];

        if (random_bytes(u, sizeof u) < 0)
                abort(); /* getrandom without GRND_NONBLOCK only fails on bad arguments */
        u[6] = (u[6] & 0x0f) | 0x40;
        u[8] = (u[8] & 0x3f) | 0x80;
        hex_encode(u, sizeof u, hex);
        snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

int read_boot_id(char out[37]) {
        _cleanup_free_ char *s = NULL;
        size_t n;
        int r;

        r = read_file("/proc/sys/kernel/random/boot_id", 64, &s, &n);
        if (r < 0)
                return r;
        if (n < 36)
                return -EIO;
        memcpy(out, s, 36);
        out[36] = '\0';
        return 0;
}

int proc_pid_stat_read(pid_t pid, char *buf, size_t size, const char **ret_fields) {
        _cleanup_close_ int fd = -1;
        char path[64], *p;
        ssize_t n;

        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, buf, size - 1);
        if (n < 0)
                return -errno;
        if (n == 0)
                return -ESRCH;
        buf[n] = '\0';
        /* The command name (field 2) may hold spaces and parentheses: the fields follow the last ')'. */
        p = strrchr(buf, ')');
        if (!p)
                return -EIO;
        *ret_fields = p + 1;
        return 0;
}

/* Field n (from 3, as proc(5) numbers them) of /proc/PID/stat, a number. */
static int proc_pid_stat_field(pid_t pid, int n, uint64_t *ret) {
        char s[4096];
        const char *p;
        int r;

        r = proc_pid_stat_read(pid, s, sizeof s, &p);
        if (r < 0)
                return r;
        for (int field = 3; field < n; field++) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return -EIO;
        }
        /* Field 3 (the state) is a letter; every later one asked for is a number. */
        if (sscanf(p, " %" SCNu64, ret) != 1)
                return -EIO;
        return 0;
}

int proc_pid_starttime(pid_t pid, uint64_t *ret) {
        return proc_pid_stat_field(pid, 22, ret);
}

pid_t proc_pid_ppid(pid_t pid) {
        uint64_t v;

        return proc_pid_stat_field(pid, 4, &v) < 0 ? -1 : (pid_t) v;
}

int write_all(int fd, const void *data, size_t len) {
        const char *p = data;

        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                len -= (size_t) k;
        }
        return 0;
}

int mkdir_p(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = '\0';
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int open_dir_nofollow(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        return fd < 0 ? -errno : fd;
}

int write_file_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, uid_t uid,
                         gid_t gid) {
        char tmp[NAME_MAX + 1];
        uint8_t rnd[6];
        char rhex[13];
        _cleanup_close_ int fd = -1;
        int r;

        if (strlen(name) > NAME_MAX - 20)
                return -ENAMETOOLONG;
        r = random_bytes(rnd, sizeof rnd);
        if (r < 0)
                return r;
        hex_encode(rnd, sizeof rnd, rhex);
        snprintf(tmp, sizeof tmp, ".#%s.%s", name, rhex);

        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r = write_all(fd, data, len);
        if (r < 0)
                goto fail;
        if (uid != (uid_t) -1 && fchown(fd, uid, gid) < 0) {
                r = -errno;
                goto fail;
        }
        if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
                r = -errno;
                goto fail;
        }
        if (renameat(dirfd, tmp, dirfd, name) < 0) {
                r = -errno;
                goto fail;
        }
        if (fsync(dirfd) < 0)
                return -errno;
        return 0;
fail:
        (void) unlinkat(dirfd, tmp, 0);
        return r;
}

int path_split(const char *path, char **ret_dir, const char **ret_name) {
        const char *slash = strrchr(path, '/');
        char *dir;

        if (!slash)
                dir = strdup(".");
        else if (slash == path)
                dir = strdup("/");
        else
                dir = strndup(path, (size_t) (slash - path));
        if (!dir)
                return -ENOMEM;
        *ret_dir = dir;
        *ret_name = slash ? slash + 1 : path;
        return 0;
}

int path_normalize(const char *path, char **ret) {
        size_t n = 0;
        char *out;

        if (!path || path[0] != '/')
                return -EINVAL;
        out = malloc(strlen(path) + 2);
        if (!out)
                return -ENOMEM;
        for (const char *s = path; *s;) {
                size_t len;

                s += strspn(s, "/");
                len = strcspn(s, "/");
                if (len == 2 && s[0] == '.' && s[1] == '.') {
                        while (n > 0 && out[n - 1] != '/')
                                n--;
                        if (n > 0)
                                n--; /* the slash before the component dropped */
                } else if (len > 0 && !(len == 1 && s[0] == '.')) {
                        out[n++] = '/';
                        memcpy(out + n, s, len);
                        n += len;
                }
                s += len;
        }
        if (n == 0)
                out[n++] = '/';
        out[n] = '\0';
        *ret = out;
        return 0;
}

bool path_is_below(const char *path, const char *dir) {
        size_t n = strlen(dir);

        if (streq(dir, "/"))
                return path[0] == '/';
        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int dirfd = -1;
        const char *name;
        int r;

        r = path_split(path, &dir, &name);
        if (r < 0)
                return r;
        if (!*name)
                return -EISDIR;
        dirfd = open_dir_nofollow(dir);
        if (dirfd < 0)
                return dirfd;
        return write_file_atomic_at(dirfd, name, data, len, mode, uid, gid);
}

int read_file_at(int dirfd, const char *name, bool nofollow, size_t max, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t n = 0;

        /* O_NONBLOCK so that a FIFO planted at name cannot hang the open. */
        fd = openat(dirfd, name, O_RDONLY | (nofollow ? O_NOFOLLOW : 0) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;

        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        /* Read one byte past max, so a file that grew after fstat is still caught. */
        for (;;) {
                ssize_t k = read(fd, buf + n, max + 1 - n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
                if (n > max)
                        return -EFBIG;
        }
        buf[n] = '\0';
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = n;
        return 0;
}

int read_file(const char *path, size_t max, char **ret, size_t *ret_size) {
        return read_file_at(AT_FDCWD, path, false, max, ret, ret_size);
}

size_t strv_length(char *const *v) {
        size_t n = 0;

        while (v && v[n])
                n++;
        return n;
}

int strv_push(char ***v, size_t *n, char *s) {
        char **w;

        if (!s)
                return -ENOMEM;
        w = reallocarray(*v, *n + 2, sizeof(char *));
        if (!w) {
                free(s);
                return -ENOMEM;
        }
        w[(*n)++] = s;
        w[*n] = NULL;
        *v = w;
        return 0;
}

int strv_copy(char *const *v, char ***ret) {
        _cleanup_strv_free_ char **w = NULL;
        size_t n = strv_length(v);

        w = calloc(n + 1, sizeof(char *));
        if (!w)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                w[i] = strdup(v[i]);
                if (!w[i])
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(w);
        return 0;
}

bool strv_equal(char *const *a, char *const *b) {
        size_t n = strv_length(a);

        if (n != strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return true;
}

int strv_env_set(char ***env, size_t *n, char *kv) {
        size_t klen;

        if (!kv)
                return -ENOMEM;
        klen = strcspn(kv, "=");
        for (size_t i = 0; i < *n; i++)
                if (strncmp((*env)[i], kv, klen) == 0 && (*env)[i][klen] == kv[klen]) {
                        free((*env)[i]);
                        (*env)[i] = kv;
                        return 0;
                }
        return strv_push(env, n, kv);
}

char *strjoin(const char *a, const char *b) {
        char *s;

        return asprintf(&s, "%s%s", a, b) < 0 ? NULL : s;
}

int strv_env_set_copy(char ***env, const char *kv) {
        size_t n = strv_length(*env);

        return strv_env_set(env, &n, strdup(kv));
}

static bool real_short(double v) {
        char buf[32];

        snprintf(buf, sizeof buf, "%.15g", v);
        return strtod(buf, NULL) == v;
}

size_t json_real_flags(const json_t *j) {
        const char *key;
        json_t *v;
        size_t i;

        if (json_is_real(j))
                return real_short(json_real_value(j)) ? JSON_REAL_PRECISION(15) : 0;
        if (json_is_object(j)) {
                json_object_foreach((json_t *) j, key, v) if (json_real_flags(v) == 0) return 0;
        } else if (json_is_array(j))
                json_array_foreach(j, i, v) if (json_real_flags(v) == 0) return 0;
        return JSON_REAL_PRECISION(15);
}

char *json_dump_line(const json_t *j, size_t flags) {
        _cleanup_free_ char *s = json_dumps(j, flags);
        char *t;
        size_t n;

        if (!s)
                return NULL;
        n = strlen(s);
        t = malloc(n + 2);
        if (t) {
                memcpy(t, s, n);
                t[n] = '\n';
                t[n + 1] = '\0';
        }
        explicit_bzero(s, n);
        return t;
}

size_t utf8_sequence(const char *p, size_t len, size_t *ret_bad) {
        const unsigned char *u = (const unsigned char *) p;
        unsigned char lo = 0x80, hi = 0xBF;
        size_t n;

        if (u[0] < 0x80)
                return 1;
        if (u[0] >= 0xC2 && u[0] <= 0xDF)
                n = 2;
        else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
                n = 3;
                lo = u[0] == 0xE0 ? 0xA0 : 0x80;
                hi = u[0] == 0xED ? 0x9F : 0xBF;
        } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
                n = 4;
                lo = u[0] == 0xF0 ? 0x90 : 0x80;
                hi = u[0] == 0xF4 ? 0x8F : 0xBF;
        } else
                n = 0;
        for (size_t i = 1; i < n; i++) {
                /* Only the second byte has a narrower range. */
                if (i >= len || u[i] < (i == 1 ? lo : 0x80) || u[i] > (i == 1 ? hi : 0xBF)) {
                        n = i;
                        goto bad;
                }
        }
        if (n > 0)
                return n;
        n = 1;
bad:
        if (ret_bad)
                *ret_bad = n;
        return 0;
}

/* Copies s[0..len) to out (NULL: only counts) with ill-formed subparts as U+FFFD; returns the length. */
static size_t utf8_repair_into(const char *s, size_t len, char *out, size_t *ret_replaced) {
        size_t i = 0, o = 0, replaced = 0;

        while (i < len) {
                size_t bad = 0, k = utf8_sequence(s + i, len - i, &bad);

                if (k > 0) {
                        if (out)
                                memcpy(out + o, s + i, k);
                        i += k, o += k;
                        continue;
                }
                if (out)
                        memcpy(out + o, UTF8_REPLACEMENT, 3);
                i += bad, o += 3, replaced++;
        }
        *ret_replaced = replaced;
        return o;
}

int text_rewrite(const char *s, size_t len, TextRewriter into, char **ret, size_t *ret_len) {
        size_t rewritten, n = into(s, len, NULL, &rewritten);
        char *out;

        if (rewritten == 0) {
                *ret = NULL;
                return 0;
        }
        out = malloc(n + 1);
        if (!out)
                return -ENOMEM;
        (void) into(s, len, out, &rewritten);
        out[n] = '\0';
        *ret = out;
        *ret_len = n;
        return 1;
}

int utf8_repair(const char *s, size_t len, char **ret, size_t *ret_len) {
        return text_rewrite(s, len, utf8_repair_into, ret, ret_len);
}

json_t *json_string_lossy(const char *s) {
        _cleanup_free_ char *fixed = NULL;
        size_t len = strlen(s);

        if (utf8_repair(s, len, &fixed, &len) < 0)
                return NULL;
        return json_stringn(fixed ?: s, len);
}

bool context_name_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) name[i]) && !strchr("_.-", name[i]))
                        return false;
        /* "." and ".." would name directories, not contexts. */
        return !streq(name, ".") && !streq(name, "..");
}

int write_string_file(const char *path, const char *value) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        size_t n = strlen(value);

        if (fd < 0)
                return -errno;
        if (write(fd, value, n) != (ssize_t) n)
                return -errno;
        return 0;
}

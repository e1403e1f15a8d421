/* Shared helpers: clocks, durations, randomness, hex, atomic files, /proc.
 * All return 0 or a positive value on success and -errno on failure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>

#include "macro.h"

/* U+FFFD REPLACEMENT CHARACTER in UTF-8. */
#define UTF8_REPLACEMENT "\xEF\xBF\xBD"

usec_t now_usec(clockid_t clock);

/* "30", "30s", "500ms", "5min", "2h", "1.5s", "250us". A bare number is seconds.
 * "infinity" gives USEC_INFINITY. A value above 0 is at least 1 us (never 0).
 * -EINVAL on anything else (hexadecimal too), -ERANGE on overflow. */
int parse_duration(const char *s, usec_t *ret);
/* Formats a duration for people: "2d 3h", "5min 2s", "850ms". Returns buf. */
char *format_duration(char *buf, size_t size, usec_t usec);
/* RFC 3339 UTC with milliseconds for a CLOCK_REALTIME value: "2026-11-29T10:11:32.123Z". */
char *format_timestamp(char *buf, size_t size, usec_t realtime);
/* The same with microseconds, as jupyter_client writes a message header's date. */
char *format_timestamp_usec(char *buf, size_t size, usec_t realtime);
/* The inverse of format_timestamp(): exactly that form, a date that exists, from 1970 on; -EINVAL otherwise. */
int parse_timestamp(const char *s, usec_t *ret);

/* Parses a whole decimal unsigned number in [min, max]; -EINVAL/-ERANGE otherwise. */
int parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *ret);
/* Bytes, with an optional K, M or G suffix (powers of 1024): "10M", into the size_t at data; at least 1 KiB, at most
 * 1 GiB. A ValueParser of the configuration (config-value.h): on -EINVAL, *ret_reason says why in a few words. */
int parse_size(const char *value, void *data, const char **ret_reason);

int random_bytes(void *p, size_t n);
/* 32-bit FNV-1a of a string: cheap, and stable across builds and machines (ports are derived from it). */
uint32_t string_hash(const char *s);

/* A set of strings, each with a number (typically an index into the caller's array), for lookups in constant time
 * where a loop over everything earlier would make loading n items cost n^2. The keys are borrowed: they must
 * outlive the index. Zero-initialise it; free it with str_index_done. */
typedef struct StrIndex {
        const char **keys;
        size_t *values;
        size_t size, n;
} StrIndex;
/* Adds key with value: 0 when added; 1 when key was there already (*ret_value, may be NULL, gets its value and
 * nothing changes); -ENOMEM. */
int str_index_put(StrIndex *m, const char *key, size_t value, size_t *ret_value);
void str_index_done(StrIndex *m);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void hex_encode(const void *p, size_t n, char *out);
/* The value of one hex digit (either case), or -1. */
int hex_digit_value(char c);
/* Decodes exactly n bytes from 2n hex digits; -EINVAL otherwise. */
int hex_decode(const char *s, void *out, size_t n);
/* A random (version 4) UUID, 36 characters and a NUL. */
void uuid_random(char out[37]);

/* The kernel's boot_id (36 characters and a NUL). */
int read_boot_id(char out[37]);
/* Reads /proc/PID/stat into buf (size bytes; without allocating) and points *ret_fields past the command name,
 * at field 3 (the state letter). -ESRCH when pid is gone, -EIO when there is no ')', else -errno. */
int proc_pid_stat_read(pid_t pid, char *buf, size_t size, const char **ret_fields);
/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat),
 * which with the pid identifies a process across pid reuse. -ESRCH if gone. */
int proc_pid_starttime(pid_t pid, uint64_t *ret);
/* The parent of pid (/proc/PID/stat field 4), or -1 when it cannot be read. */
pid_t proc_pid_ppid(pid_t pid);

/* Writes all len bytes, retrying after EINTR and short writes. Async-signal-safe (a forked child may use it). */
int write_all(int fd, const void *data, size_t len);

/* Creates path and its missing parents with mode (existing ones are left alone). */
int mkdir_p(const char *path, mode_t mode);

/* Opens a directory without following a symlink at its last component. */
int open_dir_nofollow(const char *path);

/* Writes data to name inside dirfd atomically: a temporary file created with
 * O_EXCL|O_NOFOLLOW in the same directory, fchown (when uid != (uid_t)-1),
 * fchmod, fsync, renameat over name (a symlink at name is replaced, never
 * followed), then fsync of the directory. */
int write_file_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid);
/* The same for a path: opens its parent with open_dir_nofollow. */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid);

/* Reads a whole (small) regular file of at most max bytes (-EFBIG beyond; -EISDIR, -EINVAL for other kinds;
 * a FIFO cannot hang the open), relative to dirfd, without following a symlink at name when nofollow.
 * NUL-terminated; *ret_size (may be NULL) excludes the NUL. */
int read_file_at(int dirfd, const char *name, bool nofollow, size_t max, char **ret, size_t *ret_size);
int read_file(const char *path, size_t max, char **ret, size_t *ret_size);
/* Writes value to an existing file in one write(2), as cgroupfs and procfs want it (no create, no truncate). */
int write_string_file(const char *path, const char *value);

/* The length (1-4) of the well-formed UTF-8 sequence at p[0..len), or 0 when there is none: *ret_bad (may be
 * NULL) is then the length of the maximal ill-formed subpart there (Unicode's "U+FFFD substitution of maximal
 * subparts", what Python's errors="replace" does), at least 1. len must be > 0. Surrogates (ED A0-BF) and code
 * points over U+10FFFF are ill-formed. */
size_t utf8_sequence(const char *p, size_t len, size_t *ret_bad);

/* Copies s[0..len) rewritten to out (NULL: only counts); returns the length written, and the number of units
 * rewritten in *ret_rewritten. */
typedef size_t (*TextRewriter)(const char *s, size_t len, char *out, size_t *ret_rewritten);
/* Runs into twice (to count, then to write): 0 with *ret NULL when it rewrote nothing (nothing copied), 1 with
 * *ret a new NUL-terminated buffer of *ret_len bytes (the caller frees it), -ENOMEM. */
int text_rewrite(const char *s, size_t len, TextRewriter into, char **ret, size_t *ret_len);

/* The text s[0..len) with each ill-formed UTF-8 subpart replaced by U+FFFD (EF BF BD); NUL bytes are kept.
 * Returns 0 and sets *ret to NULL when s is valid UTF-8 already (nothing copied), 1 with *ret a new
 * NUL-terminated buffer (the caller frees it) of *ret_len bytes when something was replaced, -ENOMEM. */
int utf8_repair(const char *s, size_t len, char **ret, size_t *ret_len);

/* A JSON string of s; text that is not UTF-8 (a path, a kernel's output) is kept with U+FFFD in place of each
 * ill-formed subpart (utf8_repair()) rather than lost. NULL on out of memory. */
json_t *json_string_lossy(const char *s);

/* NULL-terminated string vectors (freed with strv_free()). A NULL vector is empty. */
size_t strv_length(char *const *v);
/* Appends s to *v (whose length is *n), taking ownership of s in every case; s NULL: -ENOMEM. */
int strv_push(char ***v, size_t *n, char *s);
/* A deep copy. */
int strv_copy(char *const *v, char ***ret);
/* The same strings in the same order. */
bool strv_equal(char *const *a, char *const *b);

/* Sets "K=V" in the environment vector *env (of *n entries): a variable already there is replaced in place, so
 * the first place it was set keeps the order; a new one is appended. Takes kv in every case; NULL: -ENOMEM. */
int strv_env_set(char ***env, size_t *n, char *kv);
/* The same for a NULL-terminated *env, with a copy of kv. */
int strv_env_set_copy(char ***env, const char *kv);
/* a followed by b, newly allocated; NULL on out of memory. */
char *strjoin(const char *a, const char *b);

/* The flag that makes jansson write every real of j as short as it reads back exactly: JSON_REAL_PRECISION(15)
 * when each does (an uptime rounded to milliseconds prints 7.978, not 7.9779999999999998), else 0, jansson's 17
 * digits, which a kernel's own numbers in an output may need. */
size_t json_real_flags(const json_t *j);

/* json_dumps(j, flags) with a trailing newline, as text files and protocol lines end (jansson adds none).
 * The intermediate text is wiped: it may hold a connection key. Newly allocated; NULL on out of memory. */
char *json_dump_line(const json_t *j, size_t flags);

/* Splits "dir/name" into a newly allocated dir (or ".") and a pointer to the name. */
int path_split(const char *path, char **ret_dir, const char **ret_name);
/* The absolute path with empty components, "." and ".." resolved by their text alone, without looking at the
 * filesystem ("/a//b/./c/../d" is "/a/b/d"; "/.." is "/"). Newly allocated; -EINVAL for a relative path. */
int path_normalize(const char *path, char **ret);
/* True when the normalized path is dir itself or below it (dir normalized too; "/" holds everything). */
bool path_is_below(const char *path, const char *dir);

bool context_name_valid(const char *name);

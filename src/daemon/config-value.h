/* The parsers of single configuration values (paths, argv, env, durations, sizes, limits, ...): pure
 * functions of the text, each a ValueParser for a row of config.c's key table. */
#pragma once

#include <stdbool.h>

/* A kernel listens on five ports: shell, iopub, stdin, control and heartbeat. */
#define PORTS_PER_KERNEL 5

/* Parses value into *data, which it writes only on success. On -EINVAL, *ret_reason says why in a few words. */
typedef int (*ValueParser)(const char *value, void *data, const char **ret_reason);

/* Splits on blanks. '…' quotes literally; "…" quotes with \" and \\ as the only escapes (any other backslash is
 * kept). Quoted and unquoted pieces next to each other make one word, as in a shell. */
int argv_split(const char *s, char ***ret, const char **ret_reason);

int parse_absolute_path(const char *value, void *data, const char **ret_reason);
int parse_socket_path(const char *value, void *data, const char **ret_reason);
int parse_socket_mode(const char *value, void *data, const char **ret_reason);
int parse_port_range(const char *value, void *data, const char **ret_reason);
int parse_argv(const char *value, void *data, const char **ret_reason);
int parse_restart(const char *value, void *data, const char **ret_reason);
int parse_user_name(const char *value, void *data, const char **ret_reason);
int parse_env(const char *value, void *data, const char **ret_reason);
int parse_bool(const char *value, void *data, const char **ret_reason);
int parse_duration_positive(const char *value, void *data, const char **ret_reason);
int parse_duration_or_no(const char *value, void *data, const char **ret_reason);
int parse_memory(const char *value, void *data, const char **ret_reason);
int parse_cpu_quota(const char *value, void *data, const char **ret_reason);
int parse_tasks(const char *value, void *data, const char **ret_reason);
int parse_transport(const char *value, void *data, const char **ret_reason);
int parse_preload(const char *value, void *data, const char **ret_reason);
int parse_kernel_name(const char *value, void *data, const char **ret_reason);
int parse_restore(const char *value, void *data, const char **ret_reason);
int parse_count(const char *value, void *data, const char **ret_reason);
/* 0 to 1000. */
int parse_count_or_zero(const char *value, void *data, const char **ret_reason);
/* A uid as a number (into a uid_t). */
int parse_uid(const char *value, void *data, const char **ret_reason);

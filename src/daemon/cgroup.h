/* Where a process sits in the cgroup hierarchies, and how many OOM kills the
 * memory cgroup of a process has seen: cgroup v2's
 * memory.events or v1's memory.oom_control, both with an "oom_kill N" line.
 * Comparing the count at a kernel's launch and at its SIGKILL tells an OOM
 * kill from any other SIGKILL, where the system tells at all. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* From the text of /proc/PID/cgroup ("ID:CONTROLLERS:PATH" lines), the path
 * of the first line whose comma-separated controllers include controller
 * ("memory", "cpu" of "cpu,cpuacct", "name=systemd"), or with controller NULL
 * of the v2 line "0::PATH". Newly allocated; NULL when there is none. */
char *cgroup_proc_path(const char *proc_cgroup, const char *controller);
/* The same, read from /proc/PID/cgroup. */
char *cgroup_pid_path(pid_t pid, const char *controller);

/* From the text of /proc/PID/cgroup, the paths of the counter files to try,
 * in order, below root (normally "/sys/fs/cgroup"): the v2 memory.events of
 * the "0::" line, then the v1 memory.oom_control of the line whose
 * controllers include "memory". ret[i] are newly allocated; returns how many
 * (0 to 2). */
int cgroup_oom_paths(const char *proc_cgroup, const char *root, char *ret[2]);

/* The value of key in "key value" lines (memory.events, memory.oom_control). -ENOENT when absent. */
int cgroup_keyed_value(const char *text, const char *key, uint64_t *ret);

/* The oom_kill count of pid's memory cgroup. -ENOENT when the system does not tell. */
int cgroup_oom_kills(pid_t pid, uint64_t *ret);

/* The counter file of pid's memory cgroup that has an oom_kill line (newly allocated), to read again once pid is
 * gone; and reading it. -ENOENT when there is none. */
int cgroup_oom_path(pid_t pid, char **ret);
int cgroup_read_oom(const char *path, uint64_t *ret);

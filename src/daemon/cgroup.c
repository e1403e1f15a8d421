#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup.h"
#include "util.h"

/* Whether the comma-separated list holds name. */
static bool list_has(const char *list, size_t len, const char *name) {
        size_t n = strlen(name);

        for (const char *p = list, *end = list + len; p < end;) {
                const char *comma = memchr(p, ',', (size_t) (end - p));
                size_t l = comma ? (size_t) (comma - p) : (size_t) (end - p);
                if (l == n && memcmp(p, name, n) == 0)
                        return true;
                p += l + 1;
        }
        return false;
}

char *cgroup_proc_path(const char *proc_cgroup, const char *controller) {
        for (const char *line = proc_cgroup; line && *line;) {
                const char *nl = strchr(line, '\n');
                size_t len = nl ? (size_t) (nl - line) : strlen(line);
                /* "ID:CONTROLLERS:PATH" */
                const char *c1 = memchr(line, ':', len);
                const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t) (c1 + 1 - line)) : NULL;
                if (c2 && (controller ? list_has(c1 + 1, (size_t) (c2 - c1 - 1), controller)
                                      : c1 - line == 1 && line[0] == '0' && c2 == c1 + 1))
                        return strndup(c2 + 1, len - (size_t) (c2 + 1 - line));
                line = nl ? nl + 1 : NULL;
        }
        return NULL;
}

static int proc_cgroup_read(pid_t pid, char **ret) {
        char proc[64];

        snprintf(proc, sizeof proc, "/proc/%d/cgroup", (int) pid);
        return read_file(proc, 64 * 1024, ret, NULL);
}

char *cgroup_pid_path(pid_t pid, const char *controller) {
        _cleanup_free_ char *text = NULL;

        if (proc_cgroup_read(pid, &text) < 0)
                return NULL;
        return cgroup_proc_path(text, controller);
}

int cgroup_oom_paths(const char *proc_cgroup, const char *root, char *ret[2]) {
        _cleanup_free_ char *v2path = cgroup_proc_path(proc_cgroup, NULL);
        _cleanup_free_ char *v1path = cgroup_proc_path(proc_cgroup, "memory");
        char *v2 = NULL, *v1 = NULL;
        int n = 0;

        if (v2path && asprintf(&v2, "%s%s/memory.events", root, v2path) < 0)
                v2 = NULL;
        if (v1path && asprintf(&v1, "%s/memory%s/memory.oom_control", root, v1path) < 0)
                v1 = NULL;
        if (v2)
                ret[n++] = v2;
        if (v1)
                ret[n++] = v1;
        return n;
}

int cgroup_keyed_value(const char *text, const char *key, uint64_t *ret) {
        size_t klen = strlen(key);

        for (const char *line = text; line && *line;) {
                if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
                        uint64_t v;
                        if (sscanf(line + klen + 1, "%" SCNu64, &v) != 1)
                                return -EBADMSG;
                        *ret = v;
                        return 0;
                }
                line = strchr(line, '\n');
                if (line)
                        line++;
        }
        return -ENOENT;
}

int cgroup_read_oom(const char *path, uint64_t *ret) {
        _cleanup_free_ char *events = NULL;

        if (read_file(path, 64 * 1024, &events, NULL) < 0)
                return -ENOENT;
        return cgroup_keyed_value(events, "oom_kill", ret) < 0 ? -ENOENT : 0;
}

int cgroup_oom_path(pid_t pid, char **ret) {
        _cleanup_free_ char *text = NULL;
        char *paths[2] = { 0 };
        uint64_t v;
        int n, r = -ENOENT;

        if (proc_cgroup_read(pid, &text) < 0)
                return -ENOENT;
        n = cgroup_oom_paths(text, "/sys/fs/cgroup", paths);
        for (int i = 0; i < n; i++) {
                if (r < 0 && cgroup_read_oom(paths[i], &v) >= 0) {
                        *ret = paths[i];
                        paths[i] = NULL;
                        r = 0;
                }
                free(paths[i]);
        }
        return r;
}

int cgroup_oom_kills(pid_t pid, uint64_t *ret) {
        _cleanup_free_ char *path = NULL;

        if (cgroup_oom_path(pid, &path) < 0)
                return -ENOENT;
        return cgroup_read_oom(path, ret);
}

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

int cgroup_oom_paths(const char *proc_cgroup, const char *root, char *ret[2]) {
        char *v2 = NULL, *v1 = NULL;
        int n = 0;

        for (const char *line = proc_cgroup; line && *line;) {
                const char *nl = strchr(line, '\n');
                size_t len = nl ? (size_t) (nl - line) : strlen(line);
                /* "ID:CONTROLLERS:PATH" */
                const char *c1 = memchr(line, ':', len);
                const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t) (c1 + 1 - line)) : NULL;
                if (c2) {
                        const char *path = c2 + 1;
                        int plen = (int) (len - (size_t) (path - line));
                        if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1 && !v2) {
                                if (asprintf(&v2, "%s%.*s/memory.events", root, plen, path) < 0)
                                        v2 = NULL;
                        } else if (list_has(c1 + 1, (size_t) (c2 - c1 - 1), "memory") && !v1) {
                                if (asprintf(&v1, "%s/memory%.*s/memory.oom_control", root, plen, path) < 0)
                                        v1 = NULL;
                        }
                }
                line = nl ? nl + 1 : NULL;
        }
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
        char proc[64], *paths[2] = { 0 };
        uint64_t v;
        int n, r = -ENOENT;

        snprintf(proc, sizeof proc, "/proc/%d/cgroup", (int) pid);
        if (read_file(proc, 64 * 1024, &text, NULL) < 0)
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

/* Finding a process's OOM-kill counter: /proc/PID/cgroup parsing for v2 and v1, keyed files. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "cgroup.h"
#include "tap.h"

int main(void) {
        char *p[2] = { 0 };
        uint64_t v = 0;
        int n;

        /* A pure v2 host. */
        n = cgroup_oom_paths("0::/system.slice/kernel.service\n", "/sys/fs/cgroup", p);
        is_int(n, 1, "v2: one path");
        is_str(p[0], "/sys/fs/cgroup/system.slice/kernel.service/memory.events", "v2: memory.events");
        free(p[0]);

        /* A hybrid host like these machines: memory bound to v1. v2 first, then v1. */
        n = cgroup_oom_paths("12:pids:/a\n"
                             "4:cpu,cpuacct:/a\n"
                             "3:memory:/user.slice/x\n"
                             "1:name=systemd:/user.slice/x\n"
                             "0::/user.slice/x\n",
                             "/sys/fs/cgroup", p);
        is_int(n, 2, "hybrid: two paths");
        is_str(p[0], "/sys/fs/cgroup/user.slice/x/memory.events", "hybrid: v2 first");
        is_str(p[1], "/sys/fs/cgroup/memory/user.slice/x/memory.oom_control", "hybrid: v1 memory second");
        free(p[0]);
        free(p[1]);

        /* Controllers listed together; "memory" must be a whole name, not a prefix. */
        n = cgroup_oom_paths("5:memoryx,cpu:/no\n6:cpu,memory:/yes\n", "/r", p);
        is_int(n, 1, "only the real memory controller");
        is_str(p[0], "/r/memory/yes/memory.oom_control", "memory among several controllers");
        free(p[0]);

        is_int(cgroup_oom_paths("", "/r", p), 0, "empty text: no paths");
        is_int(cgroup_oom_paths("garbage without colons\n", "/r", p), 0, "garbage: no paths");

        /* Keyed files. */
        is_int(cgroup_keyed_value("low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n", "oom_kill", &v), 0, "v2 oom_kill found");
        is_int(v, 1, "v2 oom_kill value");
        is_int(cgroup_keyed_value("low 0\noom 7\n", "oom", &v), 0, "oom (not oom_kill) found");
        is_int(v, 7, "oom is matched whole, not as a prefix of oom_kill");
        is_int(cgroup_keyed_value("oom_kill_disable 0\nunder_oom 0\noom_kill 4", "oom_kill", &v), 0,
               "v1 oom_control, no trailing newline");
        is_int(v, 4, "v1 value");
        is_int(cgroup_keyed_value("under_oom 0\n", "oom_kill", &v), -ENOENT, "absent key: -ENOENT");
        is_int(cgroup_keyed_value("oom_kill x\n", "oom_kill", &v), -EBADMSG, "non-number: -EBADMSG");

        /* This process: either the system tells (a count) or it says -ENOENT, never anything else. */
        int r = cgroup_oom_kills(getpid(), &v);
        ok(r == 0 || r == -ENOENT, "own cgroup: a count or -ENOENT (got %d)", r);
        is_int(cgroup_oom_kills(0x7ffffff0, &v), -ENOENT, "no such process: -ENOENT");
        return tap_done();
}

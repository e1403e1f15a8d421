/* Finding a process's OOM-kill counter: /proc/PID/cgroup parsing for v2 and v1, keyed files; and
 * resources_oom_killed's reading of it against the count at launch, which the integration tests reach only
 * through the v1 eventfd on hosts like these. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cgroup.h"
#include "resources.h"
#include "tap.h"

/* Replaces the counter file's text in place (the fd resources_oom_killed reads with pread). */
static void counter_set(int fd, const char *text) {
        if (ftruncate(fd, 0) < 0 || pwrite(fd, text, strlen(text), 0) != (ssize_t) strlen(text))
                abort();
}

static void test_oom_killed(void) {
        char path[] = "/tmp/test-cgroup-XXXXXX";
        int fd = mkstemp(path);
        uint64_t one = 1;

        if (fd < 0)
                abort();
        unlink(path);
        Limits l = { .oom_fd = fd, .oom_efd = -1, .oom_base = 2, .oom_known = true };

        counter_set(fd, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        ok(!resources_oom_killed(&l), "v1 counter at its launch value (2): no OOM kill");
        counter_set(fd, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        ok(resources_oom_killed(&l), "v1 counter above its launch value (3 > 2): an OOM kill");
        counter_set(fd, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
        ok(!resources_oom_killed(&l), "counter below its launch value (1 < 2): no OOM kill");
        counter_set(fd, "low 0\nhigh 0\nmax 4\noom 3\noom_kill 2\n");
        ok(!resources_oom_killed(&l), "v2 memory.events: oom 3 is not oom_kill (2): no OOM kill");
        counter_set(fd, "low 0\nhigh 0\nmax 4\noom 3\noom_kill 5\n");
        ok(resources_oom_killed(&l), "v2 memory.events: oom_kill 5 > 2: an OOM kill");
        counter_set(fd, "under_oom 0\n");
        ok(!resources_oom_killed(&l), "a counter file without oom_kill: no OOM kill");

        counter_set(fd, "oom_kill 9\n");
        l.oom_known = false;
        ok(!resources_oom_killed(&l), "no counter read at launch: never an OOM kill");
        l.oom_known = true;

        /* v1: the eventfd the kernel signals at an OOM answers first, even if the counter says nothing. */
        counter_set(fd, "oom_kill 2\n");
        l.oom_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ok(!resources_oom_killed(&l), "v1 eventfd not signalled, counter unchanged: no OOM kill");
        if (write(l.oom_efd, &one, sizeof one) != (ssize_t) sizeof one)
                abort();
        ok(resources_oom_killed(&l), "v1 eventfd signalled: an OOM kill");
        close(l.oom_efd);
        close(fd);
}

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
        is_int(cgroup_keyed_value("low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n", "oom_kill", &v), 0,
               "v2 oom_kill found");
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

        /* Where a process sits: the v2 line, a v1 controller among several, a named hierarchy. */
        static const char text[] = "12:pids:/p\n11:cpu,cpuacct:/c\n1:name=systemd:/s\n0::/v2/k\n";
        char *q = cgroup_proc_path(text, NULL);
        is_str(q, "/v2/k", "the v2 path comes from the 0:: line");
        free(q);
        q = cgroup_proc_path(text, "cpu");
        is_str(q, "/c", "cpu found in cpu,cpuacct");
        free(q);
        q = cgroup_proc_path(text, "cpuacct");
        is_str(q, "/c", "cpuacct found in cpu,cpuacct");
        free(q);
        q = cgroup_proc_path(text, "name=systemd");
        is_str(q, "/s", "the name=systemd hierarchy");
        free(q);
        ok(!cgroup_proc_path(text, "cp"), "a prefix of a controller is not the controller");
        ok(!cgroup_proc_path("12:pids:/p\n", NULL), "no 0:: line: no v2 path");
        ok(!cgroup_proc_path("5::/x\n", NULL), "an empty controller list under another id is not v2");
        q = cgroup_proc_path("0::/last", NULL);
        is_str(q, "/last", "a last line without newline");
        free(q);
        q = cgroup_pid_path(getpid(), NULL);
        _cleanup_free_ char *q1 = cgroup_pid_path(getpid(), "memory");
        ok(q || q1, "this process has a v2 path or a v1 memory path");
        free(q);

        test_oom_killed();
        return tap_done();
}

/* Ending what a kernel left behind without blocking the loop: resources_end_group_start() kills at once,
 * goes on in the loop while anything is left, and calls back once from the loop; with nothing left it answers
 * at once. The cgroup is a directory of regular files standing in for cgroupfs (cgroup.procs listing a child
 * of the test, freezer.state), so the rounds run as on a real group without root. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "resources.h"
#include "tap.h"
#include "util.h"

typedef struct Result {
        int calls;
        int r;
        GroupKill kill;
        char group[256];
        bool loop_ran_first; /* another 0 ms timer of the loop ran before the callback */
        bool other_ran;
} Result;

static void done_cb(int r, GroupKill kill, const char *group, void *userdata) {
        Result *res = userdata;

        res->calls++;
        res->r = r;
        res->kill = kill;
        snprintf(res->group, sizeof res->group, "%s", group ?: "");
        res->loop_ran_first = res->other_ran;
}

static void other_cb(uv_timer_t *t) {
        ((Result *) t->data)->other_ran = true;
}

static pid_t child_pausing(void) {
        pid_t pid = fork();

        if (pid < 0)
                abort();
        if (pid == 0) {
                for (;;)
                        pause();
        }
        return pid;
}

static void file_put(const char *dir, const char *name, const char *text) {
        char path[512];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", dir, name);
        f = fopen(path, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0)
                abort();
}

static char *file_get(const char *dir, const char *name) {
        char path[512], *s = NULL;

        snprintf(path, sizeof path, "%s/%s", dir, name);
        return read_file(path, 4096, &s, NULL) < 0 ? NULL : s;
}

/* The child died of SIGKILL (reaped here). */
static bool killed(pid_t pid) {
        int status;

        return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void run_group(GroupKill kill, const char *what) {
        char dir[] = "/tmp/test-leftovers-XXXXXX", text[32];
        uv_loop_t loop;
        uv_timer_t other;
        Result res = { 0 };
        LeftoverEnd *e = NULL;
        pid_t pid = child_pausing();
        int r;

        if (!mkdtemp(dir) || uv_loop_init(&loop) < 0)
                abort();
        snprintf(text, sizeof text, "%d\n", (int) pid);
        file_put(dir, "cgroup.procs", text);
        if (kill == GROUP_KILL_FREEZE)
                file_put(dir, "freezer.state", "THAWED\n");
        Limits l = { .group = dir, .kill = kill };

        r = resources_end_group_start(&loop, &l, "KERNELSUP_KERNEL_ID=x", 2 * USEC_PER_SEC, done_cb, &res, &e);
        is_int(r, -EINPROGRESS, "%s: a live member: the ending goes on in the loop", what);
        ok(e != NULL, "%s: the ending is handed back", what);
        is_int(res.calls, 0, "%s: no callback from inside the call", what);
        uv_timer_init(&loop, &other);
        other.data = &res;
        uv_timer_start(&other, other_cb, 0, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(res.calls, 1, "%s: called back once", what);
        is_int(res.r, 1, "%s: one process ended", what);
        ok(res.loop_ran_first, "%s: the loop ran other work before the callback", what);
        is_int((int) res.kill, (int) kill, "%s: says how the group was ended", what);
        is_str(res.group, dir, "%s: names the group", what);
        ok(killed(pid), "%s: the member died of SIGKILL", what);
        if (kill == GROUP_KILL_FREEZE) {
                _cleanup_free_ char *st = file_get(dir, "freezer.state");
                ok(st && strncmp(st, "THAWED", 6) == 0, "%s: frozen, killed, thawed again", what);
        }
        uv_close((uv_handle_t *) &other, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
}

static void test_nothing_left(void) {
        char dir[] = "/tmp/test-leftovers-XXXXXX";
        uv_loop_t loop;
        Result res = { 0 };
        LeftoverEnd *e = (LeftoverEnd *) &res; /* must stay untouched */
        int r;

        if (!mkdtemp(dir) || uv_loop_init(&loop) < 0)
                abort();
        file_put(dir, "cgroup.procs", "");
        Limits l = { .group = dir, .kill = GROUP_KILL_V2 };
        r = resources_end_group_start(&loop, &l, "KERNELSUP_KERNEL_ID=x", USEC_PER_SEC, done_cb, &res, &e);
        is_int(r, 0, "an empty group: done at once, nothing ended");
        ok(e == (LeftoverEnd *) &res, "an empty group: nothing handed back");

        rmdir(dir);
        r = resources_end_group_start(&loop, &l, "KERNELSUP_KERNEL_ID=x", USEC_PER_SEC, done_cb, &res, &e);
        is_int(r, 0, "a group already gone (its scope went with its last process): done at once");
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(res.calls, 0, "no callback when done at once");
        uv_loop_close(&loop);
}

static void test_cancel(void) {
        char dir[] = "/tmp/test-leftovers-XXXXXX", text[32];
        uv_loop_t loop;
        Result res = { 0 };
        LeftoverEnd *e = NULL;
        pid_t pid = child_pausing();
        int r;

        if (!mkdtemp(dir) || uv_loop_init(&loop) < 0)
                abort();
        snprintf(text, sizeof text, "%d\n", (int) pid);
        file_put(dir, "cgroup.procs", text);
        Limits l = { .group = dir, .kill = GROUP_KILL_PROCS };
        r = resources_end_group_start(&loop, &l, "KERNELSUP_KERNEL_ID=x", USEC_PER_SEC, done_cb, &res, &e);
        is_int(r, -EINPROGRESS, "cancel: in progress");
        resources_end_group_cancel(e);
        resources_end_group_cancel(NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(res.calls, 0, "cancel: never called back");
        ok(killed(pid), "cancel: the first round's SIGKILL was sent all the same");
        is_int(uv_loop_close(&loop), 0, "cancel: no handle left open");
}

static void test_subreaper(void) {
        uv_loop_t loop;
        Result res = { 0 };
        LeftoverEnd *e = NULL;
        int r;

        if (uv_loop_init(&loop) < 0)
                abort();
        Limits l = { .kill = GROUP_KILL_NONE };
        /* Nothing of ours carries the tag: three quiet rounds, in the loop. */
        r = resources_end_group_start(&loop, &l, "KERNELSUP_KERNEL_ID=none-such", USEC_PER_SEC, done_cb, &res, &e);
        is_int(r, -EINPROGRESS, "subreaper: quiet rounds go on in the loop");
        uv_run(&loop, UV_RUN_DEFAULT);
        is_int(res.calls, 1, "subreaper: called back once");
        is_int(res.r, 0, "subreaper: nothing ended");
        is_str(res.group, "", "subreaper: no group");
        uv_loop_close(&loop);
}

int main(void) {
        run_group(GROUP_KILL_PROCS, "cgroup.procs");
        run_group(GROUP_KILL_FREEZE, "v1 freezer");
        run_group(GROUP_KILL_V2, "cgroup.kill (no such file here: cgroup.procs)");
        test_nothing_left();
        test_cancel();
        test_subreaper();
        return tap_done();
}

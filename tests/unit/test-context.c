/* Tests of one context's state machine through its ContextHost, with the stub
 * kernel (tests/stubkernel) on a loop of its own: launch and ready, a killed
 * kernel restarted after a backoff, a kernel that exits at once (the backoff
 * doubling, failed after start_limit_burst, the cool-down; backoff_reset of readiness starting the count
 * over), the stop
 * escalation (shutdown_request; SIGTERM after shutdown_grace when the request
 * is ignored; SIGKILL at stop_timeout when SIGTERM is too), a freeze reported
 * by the host's clock_check, and the adoption of a kernel an earlier context
 * left running; the deaths of ready kernels (kill -9, a client's shutdown_request, one that acknowledges it and
 * does not exit), restarted and never failed; the heartbeat (a kernel that stops answering its pings, SIGUSR1 to
 * the stub, is unresponsive after heartbeat_misses, answers again, is restarted after unresponsive_restart, and
 * a freeze is no miss). Durations are checked only from below: a uv timer never fires early, while a loaded
 * machine may make it late. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "connfile.h"
#include "context.h"
#include "jupyter.h"
#include "util.h"
#include "tap.h"

#define SAFETY_TIMEOUT_MS 60000
#define MAX_EVENTS 256

/* A state change the host saw, at the loop's time. */
typedef struct Event {
        const Context *c;
        ContextStateKind state;
        uint64_t at; /* uv_now, ms */
        pid_t pid;   /* the context's process as it entered the state */
} Event;

/* The test's host: one loop, the contexts, what the callbacks saw. */
typedef struct World {
        uv_loop_t loop;
        uv_timer_t safety;
        bool timed_out;
        char dir[64];
        char state_dir[128], runtime_dir[128];
        int state_dirfd;
        char boot_id[37];
        ContextHost host;
        Config *config;
        Context *contexts[16];
        size_t n_contexts;
        Event events[MAX_EVENTS];
        size_t n_events;
        unsigned clock_checks;
        unsigned freezes;    /* clock_check reports this many more freezes */
        uint64_t heartbeats; /* host.heartbeat calls */
} World;

static bool host_clock_check(void *userdata) {
        World *w = userdata;

        w->clock_checks++;
        if (w->freezes == 0)
                return false;
        w->freezes--;
        /* As the supervisor does: every context re-arms its deadlines before the caller returns. */
        for (size_t i = 0; i < w->n_contexts; i++)
                if (w->contexts[i])
                        context_resumed(w->contexts[i]);
        return true;
}

static void host_state_changed(void *userdata, Context *c) {
        World *w = userdata;

        if (w->n_events < MAX_EVENTS)
                w->events[w->n_events++] = (Event){ c, context_state(c), uv_now(&w->loop), context_pid(c) };
}

static void host_heartbeat(void *userdata, Context *c) {
        World *w = userdata;

        w->heartbeats++;
}

static void host_save_changed(void *userdata, Context *c) {
}

static int host_taken_ports(void *userdata, const Context *except, uint16_t **ret, size_t *ret_n) {
        *ret = calloc(1, sizeof(uint16_t));
        *ret_n = 0;
        return *ret ? 0 : -ENOMEM;
}

static void safety_cb(uv_timer_t *t) {
        World *w = t->data;

        w->timed_out = true;
}

/* Whether c entered state since event number since. */
static bool entered_since(const World *w, const Context *c, ContextStateKind state, size_t since) {
        for (size_t i = since; i < w->n_events; i++)
                if (w->events[i].c == c && w->events[i].state == state)
                        return true;
        return false;
}

/* Runs the loop until c is in state want or passed through it (one turn of the loop may launch a kernel and
 * see it exit): true, or false at the safety timeout. */
static bool run_until(World *w, Context *c, ContextStateKind want) {
        size_t since = w->n_events;

        w->timed_out = false;
        uv_timer_start(&w->safety, safety_cb, SAFETY_TIMEOUT_MS, 0);
        while (context_state(c) != want && !entered_since(w, c, want, since) && !w->timed_out)
                uv_run(&w->loop, UV_RUN_ONCE);
        uv_timer_stop(&w->safety);
        if (w->timed_out)
                printf("# %s: still %s, not %s, after %d ms\n", context_name(c),
                       context_state_to_string(context_state(c)), context_state_to_string(want), SAFETY_TIMEOUT_MS);
        return !w->timed_out;
}

/* Runs the loop for ms (a timer of its own), whatever happens meanwhile. */
static void run_for(World *w, uint64_t ms) {
        w->timed_out = false;
        uv_timer_start(&w->safety, safety_cb, ms, 0);
        while (!w->timed_out)
                uv_run(&w->loop, UV_RUN_ONCE);
        uv_timer_stop(&w->safety);
}

/* The loop time at which c last entered state, or -1. */
static long long last_entered(const World *w, const Context *c, ContextStateKind state) {
        for (size_t i = w->n_events; i > 0; i--)
                if (w->events[i - 1].c == c && w->events[i - 1].state == state)
                        return (long long) w->events[i - 1].at;
        return -1;
}

/* The context's process as it last entered state, or -1. */
static pid_t last_entered_pid(const World *w, const Context *c, ContextStateKind state) {
        for (size_t i = w->n_events; i > 0; i--)
                if (w->events[i - 1].c == c && w->events[i - 1].state == state)
                        return w->events[i - 1].pid;
        return -1;
}

/* The value of last_exit's key in c's status, as a string ("SIGTERM", "3"), or "null". */
static char *last_exit_field(const Context *c, const char *key) {
        json_t *j = context_to_json(c), *v = json_object_get(json_object_get(j, "last_exit"), key);
        char *s = json_dumps(v, JSON_ENCODE_ANY);

        json_decref(j);
        if (s && s[0] == '"') {
                memmove(s, s + 1, strlen(s));
                s[strlen(s) - 1] = '\0';
        }
        return s;
}

static const char *stub_path(void) {
        static char path[4096];
        const char *b = getenv("KS_BUILDDIR");

        snprintf(path, sizeof path, "%s/tests/stubkernel", b ?: ".");
        return path;
}

static int write_config(World *w, char **ret_path) {
        const char *stub = stub_path();
        char *path = NULL;
        FILE *f;

        if (asprintf(&path, "%s/kernelsup.ini", w->dir) < 0)
                return -ENOMEM;
        f = fopen(path, "we");
        if (!f) {
                free(path);
                return -errno;
        }
        fprintf(f,
                "[defaults]\n"
                "argv = %s -f {kernel_file}\n"
                "autostart = no\n"
                "backoff_min = 100ms\n"
                "backoff_max = 10s\n"
                "stop_timeout = 30s\n"
                "shutdown_grace = 30s\n"
                "[context:ready]\n"
                "[context:crash]\n"
                "argv = %s --exit 3 -f {kernel_file}\n"
                "start_limit_burst = 4\n"
                "start_limit_interval = 60s\n"
                "failed_cooldown = 1s\n"
                "[context:noshutdown]\n"
                "argv = %s --ignore-shutdown -f {kernel_file}\n"
                "shutdown_grace = 300ms\n"
                "[context:noterm]\n"
                "argv = %s --ignore-shutdown --ignore-term -f {kernel_file}\n"
                "shutdown_grace = 200ms\n"
                "stop_timeout = 1s\n"
                "[context:flappy]\n"
                "start_limit_burst = 2\n"
                "backoff_max = 400ms\n"
                "[context:reset]\n"
                "backoff_reset = 2s\n"
                "[context:silent]\n"
                "heartbeat_interval = 200ms\n"
                "heartbeat_misses = 3\n"
                "unresponsive_restart = 1s\n"
                "[context:silent-kept]\n"
                "heartbeat_interval = 200ms\n"
                "heartbeat_misses = 3\n"
                "unresponsive_restart = no\n",
                stub, stub, stub, stub);
        if (fclose(f) != 0) {
                free(path);
                return -EIO;
        }
        *ret_path = path;
        return 0;
}

static int world_init(World *w) {
        _cleanup_free_ char *path = NULL, *err = NULL, *sub = NULL;
        int r;

        *w = (World){ .state_dirfd = -1 };
        snprintf(w->dir, sizeof w->dir, "/tmp/test-context-XXXXXX");
        if (!mkdtemp(w->dir))
                return -errno;
        snprintf(w->state_dir, sizeof w->state_dir, "%s/state", w->dir);
        snprintf(w->runtime_dir, sizeof w->runtime_dir, "%s/run", w->dir);
        const char *dirs[] = { w->state_dir, w->runtime_dir, "kernels", "connections" };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                free(sub);
                if (asprintf(&sub, "%s%s%s", i < 2 ? "" : w->runtime_dir, i < 2 ? "" : "/", dirs[i]) < 0)
                        return -ENOMEM;
                if (mkdir(sub, 0755) < 0)
                        return -errno;
        }
        w->state_dirfd = open(w->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (w->state_dirfd < 0)
                return -errno;
        r = write_config(w, &path);
        if (r < 0)
                return r;
        ConfigDefaults d = { .runtime_dir = w->runtime_dir,
                             .state_dir = w->state_dir,
                             .contexts_dir = "/nonexistent/contexts.d" };
        r = config_load(path, &d, &w->config, &err);
        if (r < 0) {
                printf("# %s\n", err ?: strerror(-r));
                return r;
        }
        uuid_random(w->boot_id);
        if (uv_loop_init(&w->loop) < 0)
                return -ENOMEM;
        uv_timer_init(&w->loop, &w->safety);
        w->safety.data = w;
        w->host = (ContextHost){
                .loop = &w->loop,
                .state_dirfd = w->state_dirfd,
                .state_dir = w->state_dir,
                .runtime_dir = w->runtime_dir,
                .port_min = w->config->port_min,
                .port_max = w->config->port_max,
                .boot_id = w->boot_id,
                .userdata = w,
                .clock_check = host_clock_check,
                .state_changed = host_state_changed,
                .heartbeat = host_heartbeat,
                .save_changed = host_save_changed,
                .taken_ports = host_taken_ports,
        };
        return 0;
}

static Context *world_context(World *w, const char *name) {
        _cleanup_free_ char *warning = NULL;
        const ContextConfig *cc = config_find_context(w->config, name);
        Context *c = NULL;

        if (!cc || context_new(&w->host, cc, &c, &warning) < 0 || w->n_contexts == ELEMENTSOF(w->contexts))
                return NULL;
        w->contexts[w->n_contexts++] = c;
        return c;
}

/* Frees c without stopping it, as a daemon that exits (or crashes) leaves its kernel. */
static void world_drop(World *w, Context *c) {
        for (size_t i = 0; i < w->n_contexts; i++)
                if (w->contexts[i] == c)
                        w->contexts[i] = NULL;
        context_free(c);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

static void world_done(World *w) {
        for (size_t i = 0; i < w->n_contexts; i++)
                context_free(w->contexts[i]);
        uv_close((uv_handle_t *) &w->safety, NULL);
        uv_run(&w->loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w->loop), 0, "teardown: every handle is closed (uv_loop_close)");
        config_free(w->config);
        close(w->state_dirfd);
        (void) nftw(w->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- The tests ---- */

/* Launch → ready; a killed kernel → backoff → a new kernel; stop with shutdown_request. */
static void test_ready_exit_stop(World *w) {
        Context *c = world_context(w, "ready");
        json_t *j;
        pid_t pid;

        if (!ok(c != NULL, "ready: context created"))
                return;
        is_int(context_state(c), CONTEXT_STOPPED, "ready: a new context is stopped");
        context_start(c);
        is_int(context_state(c), CONTEXT_STARTING, "ready: context_start launches at once (starting)");
        ok(context_pid(c) > 0, "ready: a process is running");
        ok(run_until(w, c, CONTEXT_READY), "ready: the stub kernel becomes ready");
        j = context_to_json(c);
        is_int(json_integer_value(json_object_get(j, "incarnation")), 1, "ready: incarnation 1");
        ok(json_string_value(json_object_get(j, "kernel_id")) != NULL, "ready: it has a kernel_id");
        json_decref(j);
        ok(faccessat(w->state_dirfd, "contexts/ready.json", F_OK, 0) == 0, "ready: its state is on disk");

        pid = context_pid(c);
        (void) kill(pid, SIGKILL);
        ok(run_until(w, c, CONTEXT_BACKOFF), "exit: a killed kernel puts the context in backoff");
        _cleanup_free_ char *sig = last_exit_field(c, "signal");
        is_str(sig, "SIGKILL", "exit: last_exit names SIGKILL");
        /* As it entered backoff: a loaded machine may stall the loop past the 100 ms backoff before this runs. */
        is_int(last_entered_pid(w, c, CONTEXT_BACKOFF), 0, "exit: no process while in backoff");
        ok(run_until(w, c, CONTEXT_READY), "exit: after the backoff a new kernel is ready");
        ok(context_pid(c) > 0 && context_pid(c) != pid, "exit: the new kernel is another process");
        j = context_to_json(c);
        is_int(json_integer_value(json_object_get(j, "incarnation")), 2, "exit: incarnation 2");
        is_int(json_integer_value(json_object_get(j, "restarts")), 1, "exit: restarts 1");
        json_decref(j);

        context_stop(c);
        is_int(context_state(c), CONTEXT_STOPPING, "stop: stopping at once");
        ok(run_until(w, c, CONTEXT_STOPPED), "stop: the kernel stops");
        _cleanup_free_ char *code = last_exit_field(c, "code");
        is_str(code, "0", "stop: it exited by itself (code 0): shutdown_request was enough");
}

/* A kernel that exits at once: backoff delays that double, failed at start_limit_burst, launched again after
 * failed_cooldown. */
static void test_backoff_failed(World *w) {
        Context *c = world_context(w, "crash");
        long long backoff_at[8], start_at[8];
        unsigned n_backoff = 0, n_start = 0;
        size_t first = w->n_events;

        if (!ok(c != NULL, "crash: context created"))
                return;
        context_start(c);
        ok(run_until(w, c, CONTEXT_FAILED), "crash: a kernel that always exits makes the context failed");
        for (size_t i = first; i < w->n_events; i++) {
                if (w->events[i].c != c)
                        continue;
                if (w->events[i].state == CONTEXT_BACKOFF && n_backoff < ELEMENTSOF(backoff_at))
                        backoff_at[n_backoff++] = (long long) w->events[i].at;
                if (w->events[i].state == CONTEXT_STARTING && n_start < ELEMENTSOF(start_at))
                        start_at[n_start++] = (long long) w->events[i].at;
        }
        is_int(n_start, 4, "crash: failed after exactly start_limit_burst (4) launches");
        is_int(n_backoff, 3, "crash: a backoff between each two launches");
        _cleanup_free_ char *code = last_exit_field(c, "code");
        is_str(code, "3", "crash: last_exit has its exit code");
        /* backoff_delay(attempt n) lies in [min * 2^n / 2, min * 2^n): 50, 100, 200 ms at least. */
        for (unsigned i = 0; i < n_backoff && i + 1 < n_start; i++) {
                long long waited = start_at[i + 1] - backoff_at[i], floor_ms = 50LL << i;
                ok(waited >= floor_ms, "crash: backoff %u lasted at least %lld ms (%lld)", i + 1, floor_ms, waited);
        }

        long long failed_at = last_entered(w, c, CONTEXT_FAILED);
        ok(run_until(w, c, CONTEXT_STARTING), "cool-down: a failed context is launched again");
        ok(last_entered(w, c, CONTEXT_STARTING) - failed_at >= 1000, "cool-down: not before failed_cooldown (1 s)");
        /* A backoff long enough that the loop cannot run past it (a loaded machine may stall it for 50 ms)
         * before the stop below lands in it. */
        ContextConfig *slow = context_config_dup(context_config(c));
        if (slow) {
                slow->backoff_min = slow->backoff_max = 30 * USEC_PER_SEC;
                (void) context_set_config(c, slow);
                context_config_free(slow);
        }
        ok(run_until(w, c, CONTEXT_BACKOFF), "cool-down: the start limit starts afresh (backoff, not failed)");
        context_stop(c);
        is_int(context_state(c), CONTEXT_STOPPED, "crash: stop during backoff is at once");
}

/* Stop escalation: SIGTERM after shutdown_grace when shutdown_request is ignored. */
static void test_stop_sigterm(World *w) {
        Context *c = world_context(w, "noshutdown");
        long long t0;

        if (!ok(c != NULL, "noshutdown: context created"))
                return;
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "noshutdown: ready"))
                return;
        t0 = (long long) uv_now(&w->loop);
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "noshutdown: stopped although it ignores shutdown_request");
        _cleanup_free_ char *sig = last_exit_field(c, "signal");
        is_str(sig, "SIGTERM", "noshutdown: ended by SIGTERM (stop_timeout is 30 s, shutdown_grace 300 ms)");
        ok(last_entered(w, c, CONTEXT_STOPPED) - t0 >= 300, "noshutdown: not before shutdown_grace");

        /* A freeze seen at the grace's end re-arms it: SIGTERM only a full grace later. */
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "freeze: ready again"))
                return;
        w->freezes = 1;
        unsigned checks = w->clock_checks;
        t0 = (long long) uv_now(&w->loop);
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "freeze: stopped");
        ok(w->freezes == 0 && w->clock_checks >= checks + 2,
           "freeze: the stop timer asked clock_check, and asked again after the re-armed grace");
        ok(last_entered(w, c, CONTEXT_STOPPED) - t0 >= 600, "freeze: SIGTERM came a second grace later");
        _cleanup_free_ char *sig2 = last_exit_field(c, "signal");
        is_str(sig2, "SIGTERM", "freeze: ended by SIGTERM");
}

/* Stop escalation: SIGKILL at stop_timeout when SIGTERM is ignored too. */
static void test_stop_sigkill(World *w) {
        Context *c = world_context(w, "noterm");
        long long t0;

        if (!ok(c != NULL, "noterm: context created"))
                return;
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "noterm: ready"))
                return;
        t0 = (long long) uv_now(&w->loop);
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "noterm: stopped although it ignores shutdown_request and SIGTERM");
        _cleanup_free_ char *sig = last_exit_field(c, "signal");
        is_str(sig, "SIGKILL", "noterm: ended by SIGKILL");
        ok(last_entered(w, c, CONTEXT_STOPPED) - t0 >= 1000, "noterm: not before stop_timeout (1 s)");
}

/* A ready kernel that dies is no failed start: seven kill -9s in a row, with start_limit_burst = 2, are each
 * followed by a backoff and a new kernel, never by failed. */
static void test_ready_deaths(World *w) {
        Context *c = world_context(w, "flappy");
        size_t first = w->n_events;
        pid_t pid;

        if (!ok(c != NULL, "deaths: context created"))
                return;
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "deaths: ready"))
                return;
        for (int i = 1; i <= 7; i++) {
                pid = context_pid(c);
                (void) kill(pid, SIGKILL);
                if (!ok(run_until(w, c, CONTEXT_BACKOFF), "deaths: kill -9 number %d: backoff", i) ||
                    !ok(run_until(w, c, CONTEXT_READY), "deaths: kill -9 number %d: a new kernel is ready", i))
                        break;
                ok(context_pid(c) != pid, "deaths: kill -9 number %d: another process", i);
                /* The delay doubles with each end in a row (min 100 ms, max 400 ms, equal jitter): from below. */
                long long floor_ms = (i - 1 < 2 ? 100LL << (i - 1) : 400) / 2;
                long long waited = last_entered(w, c, CONTEXT_STARTING) - last_entered(w, c, CONTEXT_BACKOFF);
                ok(waited >= floor_ms, "deaths: backoff %d lasted at least %lld ms (%lld)", i, floor_ms, waited);
        }
        ok(!entered_since(w, c, CONTEXT_FAILED, first), "deaths: never failed (start_limit_burst is 2)");
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "deaths: stopped");
}

/* Sends what is written to stderr (the context's log lines) to path until stderr_restore(saved). */
static int stderr_to(const char *path) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), saved;

        if (fd < 0)
                return -errno;
        fflush(stderr);
        saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (saved < 0 || dup2(fd, STDERR_FILENO) < 0) {
                close(fd);
                return -errno;
        }
        close(fd);
        return saved;
}

static void stderr_restore(int saved) {
        fflush(stderr);
        (void) dup2(saved, STDERR_FILENO);
        close(saved);
}

/* How many ends in a row the last "restarting in" line of the log at path counts, or -1. */
static int last_ends_in_a_row(const char *path) {
        _cleanup_free_ char *text = NULL;
        const char *p, *last = NULL;
        int n = -1;

        if (read_file(path, 1 << 20, &text, NULL) < 0)
                return -1;
        for (p = text; (p = strstr(p, "(ended ")); p++)
                last = p;
        if (last && sscanf(last, "(ended %d time", &n) != 1)
                n = -1;
        return n;
}

/* Kills c's kernel and runs the loop until c is in backoff: the event number before the kill, or -1. */
static long kill_to_backoff(World *w, Context *c) {
        size_t mark = w->n_events;

        (void) kill(context_pid(c), SIGKILL);
        return run_until(w, c, CONTEXT_BACKOFF) ? (long) mark : -1;
}

/* backoff_reset (2 s here, backoff_min 100 ms): three kills of a ready kernel in a row count 1, 2, 3 ends and
 * the third waits at least 200 ms; a kernel then ready for backoff_reset starts the count over, so its end is
 * "ended 1 time in a row" and followed by at most backoff_min. No point waits on the clock: a timer of the test,
 * started after the context's and due no sooner, fires after it (libuv runs timers in order of due time), so
 * running the loop for backoff_reset from the moment of readiness, and then for backoff_min from the moment of
 * backoff, lets the context's own timers fire first however late the loop is. */
static void test_backoff_reset(World *w) {
        Context *c = world_context(w, "reset");
        _cleanup_free_ char *log = NULL;
        size_t before_wait = 0;
        long mark;
        int saved, n = -1;

        if (!ok(c != NULL, "backoff_reset: context created") || asprintf(&log, "%s/reset.log", w->dir) < 0)
                return;
        saved = stderr_to(log);
        if (!ok(saved >= 0, "backoff_reset: stderr goes to %s", log))
                return;
        context_start(c);
        bool up = run_until(w, c, CONTEXT_READY);
        for (int i = 1; up && i <= 3; i++) {
                mark = kill_to_backoff(w, c);
                n = last_ends_in_a_row(log);
                up = mark >= 0 && run_until(w, c, CONTEXT_READY);
                if (i == 3)
                        before_wait = (size_t) last_entered(w, c, CONTEXT_STARTING) -
                                      (size_t) last_entered(w, c, CONTEXT_BACKOFF);
        }
        if (!up) {
                stderr_restore(saved);
                ok(false, "backoff_reset: three kill -9s, each followed by a ready kernel");
                return;
        }
        /* The reset: the loop runs backoff_reset from the moment the last kernel was ready. */
        run_for(w, 2000);
        mark = kill_to_backoff(w, c);
        int after = last_ends_in_a_row(log);
        run_for(w, 100);
        bool left_backoff = mark >= 0 && entered_since(w, c, CONTEXT_STARTING, (size_t) mark);
        stderr_restore(saved);
        is_int(n, 3, "backoff_reset: the third kill -9 in a row is logged \"ended 3 times in a row\"");
        ok(before_wait >= 200, "backoff_reset: the third waited at least 200 ms (%zu)", before_wait);
        is_int(after, 1, "backoff_reset: after backoff_reset of readiness, the next end is \"ended 1 time in a row\"");
        ok(left_backoff, "backoff_reset: and is followed by at most backoff_min (100 ms): a new start by then");
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "backoff_reset: stopped");
}

static void client_on_reply(KernelConn *k, Channel channel, const JupyterMsg *msg, void *userdata) {
}
static void client_on_iopub(KernelConn *k, const JupyterMsg *msg, void *userdata) {
}
static void client_on_hb(KernelConn *k, void *userdata) {
}
static const KernelConnCallbacks client_callbacks = {
        .on_reply = client_on_reply,
        .on_iopub = client_on_iopub,
        .on_hb = client_on_hb,
};

/* A client of c's kernel, from its published connection file, sends shutdown_request on control. */
static bool client_shutdown(World *w, Context *c, KernelConn **ret) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        ConnectionInfo ci;

        *ret = NULL;
        if (asprintf(&path, "%s/connections/%s.json", w->runtime_dir, context_name(c)) < 0 ||
            read_file(path, 64 * 1024, &text, NULL) < 0 || connection_info_parse(text, &ci) < 0)
                return false;
        if (kernel_conn_new(&w->loop, &ci, 0, &client_callbacks, NULL, ret) < 0)
                return false;
        return kernel_conn_send(*ret, CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0), NULL) >=
               0;
}

/* A client's shutdown_request ends a ready kernel: restarted after the backoff, five times in a row, never
 * stopped and never failed (start_limit_burst is 5). */
static void test_client_shutdown(World *w) {
        Context *c = world_context(w, "ready");
        size_t first = w->n_events;
        KernelConn *k;
        pid_t pid;

        if (!ok(c != NULL, "client shutdown: context created"))
                return;
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "client shutdown: ready"))
                return;
        for (int i = 1; i <= 5; i++) {
                pid = context_pid(c);
                ok(client_shutdown(w, c, &k), "client shutdown %d: a client sent shutdown_request", i);
                bool gone = run_until(w, c, CONTEXT_BACKOFF);
                if (k)
                        kernel_conn_close(k);
                if (!ok(gone, "client shutdown %d: the kernel exited; backoff", i) ||
                    !ok(run_until(w, c, CONTEXT_READY), "client shutdown %d: a new kernel is ready", i))
                        break;
                ok(context_pid(c) != pid, "client shutdown %d: another process", i);
        }
        ok(!entered_since(w, c, CONTEXT_FAILED, first) && !entered_since(w, c, CONTEXT_STOPPED, first),
           "client shutdown: never failed, never stopped");
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "client shutdown: stopped");
}

/* A kernel that acknowledges a client's shutdown_request and does not exit is ended as a stop ends it (SIGTERM
 * after shutdown_grace; SIGKILL at stop_timeout when SIGTERM is ignored too), then restarted. */
static void test_client_shutdown_stuck(World *w, const char *name, const char *signal, long long floor_ms) {
        Context *c = world_context(w, name);
        size_t first = w->n_events;
        KernelConn *k;
        long long t0;

        if (!ok(c != NULL, "%s: context created", name))
                return;
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "%s: ready", name))
                return;
        t0 = (long long) uv_now(&w->loop);
        ok(client_shutdown(w, c, &k), "%s: a client sent shutdown_request", name);
        ok(run_until(w, c, CONTEXT_STOPPING), "%s: its shutdown_reply on iopub makes it stopping", name);
        bool gone = run_until(w, c, CONTEXT_BACKOFF);
        if (k)
                kernel_conn_close(k);
        ok(gone, "%s: it was ended (backoff)", name);
        _cleanup_free_ char *sig = last_exit_field(c, "signal");
        is_str(sig, signal, "%s: ended by %s", name, signal);
        ok(last_entered(w, c, CONTEXT_BACKOFF) - t0 >= floor_ms, "%s: not before %lld ms", name, floor_ms);
        json_t *j = context_to_json(c);
        const char *err = json_string_value(json_object_get(j, "last_error"));
        ok(err && strstr(err, "after a client's shutdown_request"), "%s: last_error says why (%s)", name,
           err ?: "null");
        json_decref(j);
        ok(run_until(w, c, CONTEXT_READY), "%s: a new kernel is ready", name);
        ok(!entered_since(w, c, CONTEXT_FAILED, first) && !entered_since(w, c, CONTEXT_STOPPED, first),
           "%s: never failed, never stopped", name);
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "%s: stopped", name);
}

/* Runs the loop until c's kernel has answered more than answers pings: true, or false at the safety timeout. */
static bool run_until_answers(World *w, Context *c, uint64_t answers) {
        w->timed_out = false;
        uv_timer_start(&w->safety, safety_cb, SAFETY_TIMEOUT_MS, 0);
        while (context_hb_answers(c) <= answers && !w->timed_out)
                uv_run(&w->loop, UV_RUN_ONCE);
        uv_timer_stop(&w->safety);
        return !w->timed_out;
}

/* The heartbeat: a kernel that stops answering its pings (SIGUSR1 to the stub) is unresponsive after
 * heartbeat_misses intervals, ready again when it answers (SIGUSR2), and restarted once it has been
 * unresponsive for unresponsive_restart; a probe is answered; a freeze is no miss. */
static void test_heartbeat(World *w) {
        Context *c = world_context(w, "silent");
        _cleanup_free_ char *sig = NULL;
        uint64_t answers, heartbeats;
        long long t0;
        pid_t pid;

        if (!ok(c != NULL, "heartbeat: context created"))
                return;
        is_int(context_probe(c, &answers), -ESRCH, "heartbeat: a stopped context cannot be probed (-ESRCH)");
        context_start(c);
        if (!ok(run_until(w, c, CONTEXT_READY), "heartbeat: ready"))
                goto out;
        heartbeats = w->heartbeats;
        answers = context_hb_answers(c);
        ok(run_until_answers(w, c, answers), "heartbeat: the beating kernel answers the interval's pings");
        ok(w->heartbeats > heartbeats, "heartbeat: the host is told of an answer (host.heartbeat)");
        is_int(context_probe(c, &answers), 0, "heartbeat: a ready context can be probed");
        ok(run_until_answers(w, c, answers), "heartbeat: the probe is answered");
        uint64_t misses = context_counters(c)->heartbeat_misses;

        pid = context_pid(c);
        t0 = (long long) uv_now(&w->loop);
        if (!ok(kill(pid, SIGUSR1) == 0, "heartbeat: the stub kernel is told to stop answering"))
                goto out;
        ok(run_until(w, c, CONTEXT_UNRESPONSIVE), "heartbeat: a kernel that stops answering is unresponsive");
        long long silent_for = last_entered(w, c, CONTEXT_UNRESPONSIVE) - t0;
        /* Three pings unanswered (3 misses of 200 ms): the first ping after the signal is sent at most 200 ms
         * after it and found unanswered 200 ms later, so 2 × 200 ms at least. */
        ok(silent_for >= 400, "heartbeat: not before heartbeat_misses intervals (%lld ms)", silent_for);
        ok(context_counters(c)->heartbeat_misses >= misses + 3, "heartbeat: the misses are counted (%llu)",
           (unsigned long long) (context_counters(c)->heartbeat_misses - misses));
        is_int(context_pid(c), pid, "heartbeat: unresponsive is no restart yet (the same process)");

        ok(kill(pid, SIGUSR2) == 0, "heartbeat: the stub kernel is told to answer again");
        ok(run_until(w, c, CONTEXT_READY), "heartbeat: it answers again and is ready");
        is_int(context_pid(c), pid, "heartbeat: the same process, still");

        (void) kill(pid, SIGUSR1);
        if (!ok(run_until(w, c, CONTEXT_UNRESPONSIVE), "unresponsive_restart: silent again, unresponsive"))
                goto out;
        long long unresponsive_at = last_entered(w, c, CONTEXT_UNRESPONSIVE);
        ok(run_until(w, c, CONTEXT_STOPPING), "unresponsive_restart: it is ended");
        long long waited = last_entered(w, c, CONTEXT_STOPPING) - unresponsive_at;
        ok(waited >= 1000, "unresponsive_restart: not before unresponsive_restart (1 s; %lld ms)", waited);
        ok(run_until(w, c, CONTEXT_READY), "unresponsive_restart: a new kernel is ready");
        ok(context_pid(c) > 0 && context_pid(c) != pid, "unresponsive_restart: another process");
        ok(kill(pid, 0) < 0, "unresponsive_restart: the silent kernel is gone");
        sig = last_exit_field(c, "signal");
        is_str(sig, "SIGKILL", "unresponsive_restart: ended by SIGKILL (it would answer no shutdown_request)");
        json_t *j = context_to_json(c);
        const char *err = json_string_value(json_object_get(j, "last_error"));
        ok(err && strstr(err, "unresponsive_restart"), "unresponsive_restart: last_error says why (%s)",
           err ?: "null");
        json_decref(j);
out:
        /* Also after a failed point: a context freed while running would keep its kernel. */
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "heartbeat: stopped");
}

/* unresponsive_restart = no: an unresponsive kernel is left as it is; and while the host's clock_check reports
 * a freeze at every tick, silence is no miss. */
static void test_heartbeat_kept(World *w) {
        Context *c = world_context(w, "silent-kept");
        pid_t pid;

        if (!ok(c != NULL, "heartbeat kept: context created"))
                return;
        context_start(c);
        pid = context_pid(c); /* launched at once */
        if (!ok(run_until(w, c, CONTEXT_READY), "heartbeat kept: ready"))
                goto out;
        uint64_t misses = context_counters(c)->heartbeat_misses;
        w->freezes = 1000;
        unsigned checks = w->clock_checks;
        size_t since = w->n_events;
        (void) kill(pid, SIGUSR1);
        run_for(w, 1400); /* seven intervals: more than twice heartbeat_misses */
        ok(w->clock_checks >= checks + 3, "freeze: the heartbeat timer asked clock_check (%u times)",
           w->clock_checks - checks);
        ok(!entered_since(w, c, CONTEXT_UNRESPONSIVE, since),
           "freeze: silence during freezes does not make it unresponsive");
        is_int(context_counters(c)->heartbeat_misses, misses, "freeze: no miss is counted");
        w->freezes = 0;
        ok(run_until(w, c, CONTEXT_UNRESPONSIVE), "heartbeat kept: once the freezes end, unresponsive");
        long long unresponsive_at = last_entered(w, c, CONTEXT_UNRESPONSIVE);
        run_for(w, 1400);
        is_int(context_state(c), CONTEXT_UNRESPONSIVE, "heartbeat kept: still unresponsive after 1.4 s");
        is_int(context_pid(c), pid, "heartbeat kept: the same process (unresponsive_restart = no)");
        ok(last_entered(w, c, CONTEXT_UNRESPONSIVE) == unresponsive_at, "heartbeat kept: it never left the state");
out:
        w->freezes = 0;
        context_stop(c);
        ok(run_until(w, c, CONTEXT_STOPPED), "heartbeat kept: an unresponsive kernel stops");
        ok(kill(pid, 0) < 0, "heartbeat kept: its process is gone");
}

/* Leaves no kernel behind when a point of test_adopt failed (no context watches it then). */
static void end_kernel(pid_t pid) {
        if (kill(pid, 0) < 0)
                return;
        (void) kill(-pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
}

/* Adoption: a context made anew over the state of one that left its kernel running takes that kernel. */
static void test_adopt(World *w) {
        Context *a = world_context(w, "ready"), *b;
        _cleanup_free_ char *kid = NULL;
        long long inc;
        pid_t pid;
        json_t *j;

        if (!ok(a != NULL, "adopt: first context created"))
                return;
        context_start(a);
        if (!ok(run_until(w, a, CONTEXT_READY), "adopt: its kernel is ready"))
                return;
        pid = context_pid(a);
        j = context_to_json(a);
        kid = strdup(json_string_value(json_object_get(j, "kernel_id")));
        inc = json_integer_value(json_object_get(j, "incarnation"));
        json_decref(j);
        world_drop(w, a);
        ok(kill(pid, 0) == 0, "adopt: freeing the context left its kernel running");

        b = world_context(w, "ready");
        if (!ok(b != NULL, "adopt: second context created over the same state"))
                return end_kernel(pid);
        is_int(context_adopt(b), 1, "adopt: context_adopt adopts it");
        is_int(context_pid(b), pid, "adopt: the same process");
        ok(run_until(w, b, CONTEXT_READY), "adopt: the adopted kernel answers and is ready");
        j = context_to_json(b);
        is_str(json_string_value(json_object_get(j, "kernel_id")), kid, "adopt: it keeps its kernel_id");
        is_int(json_integer_value(json_object_get(j, "incarnation")), inc, "adopt: it keeps its incarnation");
        json_decref(j);
        context_stop(b);
        ok(run_until(w, b, CONTEXT_STOPPED), "adopt: the adopted kernel stops");
        if (!ok(kill(pid, 0) < 0, "adopt: its process is gone"))
                end_kernel(pid);
}

int main(void) {
        World w;
        int r;

        if (access(stub_path(), X_OK) < 0)
                skip_all("tests/stubkernel is not built (make tests/stubkernel)");
        r = world_init(&w);
        if (r < 0) {
                printf("Bail out! cannot set up the test's directories and loop: %s\n", strerror(-r));
                return 1;
        }
        test_ready_exit_stop(&w);
        test_backoff_failed(&w);
        test_stop_sigterm(&w);
        test_stop_sigkill(&w);
        test_adopt(&w);
        test_ready_deaths(&w);
        test_backoff_reset(&w);
        test_client_shutdown(&w);
        test_client_shutdown_stuck(&w, "noshutdown", "SIGTERM", 300);
        test_client_shutdown_stuck(&w, "noterm", "SIGKILL", 1000);
        test_heartbeat(&w);
        test_heartbeat_kept(&w);
        world_done(&w);
        return tap_done();
}

/* The reload plan: from the configuration the daemon runs (and which of its contexts have a kernel) and the one read
 * again, every context's action with its reason, in the order it is applied, and the report kernelctl prints. No
 * daemon, no kernel: configurations are loaded from files in a mkdtemp() directory, removed at the end. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reload.h"
#include "tap.h"
#include "util.h"

static char tmpdir[] = "/tmp/test-reload.XXXXXX";
static char main_path[PATH_MAX], run_dir[PATH_MAX], state_dir[PATH_MAX], ctx_dir[PATH_MAX];

/* Every context runs /bin/true unless it says otherwise; the directories are the test's. */
#define DEFAULTS "[defaults]\nargv = /bin/true\n"

/* The configuration in text, loaded as the daemon loads its file; bails out when it does not load. */
static Config *load(const char *text) {
        ConfigDefaults d = { .runtime_dir = run_dir, .state_dir = state_dir, .contexts_dir = ctx_dir };
        _cleanup_free_ char *error = NULL;
        Config *c = NULL;
        FILE *f = fopen(main_path, "we");

        if (!f || fputs(text, f) < 0 || fclose(f) != 0 || config_load(main_path, &d, &c, &error) < 0) {
                printf("Bail out! cannot load %s: %s\n", text, error ? error : strerror(errno));
                exit(1);
        }
        return c;
}

/* The plan from old_text to new_text, every old context running unless stopped[i]. */
static void plan(const char *old_text, const char *new_text, const bool *stopped, Config **ret_old, Config **ret_new,
                 ReloadPlan *ret) {
        Config *old = load(old_text), *new = load(new_text);
        bool running[64];

        for (size_t i = 0; i < old->n_contexts && i < 64; i++)
                running[i] = !(stopped && stopped[i]);
        if (reload_plan(old, running, new, ret) < 0) {
                printf("Bail out! reload_plan failed\n");
                exit(1);
        }
        *ret_old = old;
        *ret_new = new;
}

/* The report as the daemon sends it (jansson keeps the order the keys were set in). */
static char *report_text(const ReloadPlan *p) {
        json_auto_t *r = reload_plan_report(p);

        return r ? json_dumps(r, JSON_COMPACT) : NULL;
}

/* One action: kind, name, reason, setting (NULL: none), and whether it starts or restarts its kernel. */
static void check_action(const ReloadAction *a, ReloadKind kind, const char *name, const char *reason,
                         const char *setting, bool start, bool restart, const char *what) {
        is_str(reload_kind_to_string(a->kind), reload_kind_to_string(kind), "%s: %s", what,
               reload_kind_to_string(kind));
        is_str(a->name, name, "%s: the context is %s", what, name);
        is_str(a->reason, reason, "%s: reason \"%s\"", what, reason);
        if (setting)
                is_str(a->setting, setting, "%s: setting %s", what, setting);
        else
                ok(!a->setting, "%s: no setting", what);
        ok(a->start == start, "%s: %s", what, start ? "starts its kernel" : "does not start a kernel");
        ok(a->restart == restart, "%s: %s", what, restart ? "restarts its kernel" : "does not restart its kernel");
}

static void test_unchanged(void) {
        static const char text[] = DEFAULTS "[context:a]\n[context:b]\nrestart = no\n[context:c]\nautostart = no\n";
        _cleanup_free_ char *report = NULL;
        Config *old, *new;
        ReloadPlan p;

        plan(text, text, NULL, &old, &new, &p);
        is_int(p.n_actions, 3, "unchanged: one action a context");
        is_int(reload_plan_count(&p, RELOAD_KEEP), 3, "unchanged: every context is kept");
        for (size_t i = 0; i < p.n_actions; i++)
                check_action(&p.actions[i], RELOAD_KEEP, new->contexts[i].name, "no setting changed", NULL, false,
                             false, "unchanged");
        ok(!p.not_applied, "unchanged: nothing the daemon must restart for");
        report = report_text(&p);
        is_str(report,
               "{\"added\":[],\"removed\":[],\"restarted\":[],\"updated\":[],\"unchanged\":3,\"not_applied\":[]}",
               "unchanged: the report lists nothing and counts 3 unchanged");
        reload_plan_done(&p);
        ok(!p.actions && p.n_actions == 0 && !p.not_applied, "reload_plan_done leaves an empty plan");
        config_free(old);
        config_free(new);
}

/* Every kind at once, in the order it is applied: the removed first, then the new configuration's contexts in
 * order of name. */
static void test_every_kind(void) {
        static const char old_text[] = DEFAULTS "[context:a]\n[context:b]\n[context:c]\n[context:d]\n";
        static const char new_text[] = DEFAULTS "[context:a]\n"
                                                "[context:c]\nargv = /bin/false\n"
                                                "[context:d]\noutput_limit = 1M\n"
                                                "[context:e]\n"
                                                "[context:f]\nautostart = no\n";
        _cleanup_free_ char *report = NULL;
        Config *old, *new;
        ReloadPlan p;

        plan(old_text, new_text, NULL, &old, &new, &p);
        is_int(p.n_actions, 6, "every kind: six actions (one removed, five in the new configuration)");
        check_action(&p.actions[0], RELOAD_REMOVE, "b", "gone from the configuration", NULL, false, false,
                     "every kind [0]");
        is_int(p.actions[0].old, 1, "every kind [0]: b was old->contexts[1]");
        ok(p.actions[0].new == RELOAD_NONE, "every kind [0]: b has no place in the new configuration");
        check_action(&p.actions[1], RELOAD_KEEP, "a", "no setting changed", NULL, false, false, "every kind [1]");
        check_action(&p.actions[2], RELOAD_RESTART, "c", "argv changed", "argv", false, true, "every kind [2]");
        is_int(p.actions[2].old, 2, "every kind [2]: c was old->contexts[2]");
        is_int(p.actions[2].new, 1, "every kind [2]: c is new->contexts[1]");
        check_action(&p.actions[3], RELOAD_UPDATE, "d", "output_limit changed", "output_limit", false, false,
                     "every kind [3]");
        check_action(&p.actions[4], RELOAD_ADD, "e", "new in the configuration", NULL, true, false, "every kind [4]");
        ok(p.actions[4].old == RELOAD_NONE, "every kind [4]: e has no place in the old configuration");
        is_int(p.actions[4].new, 3, "every kind [4]: e is new->contexts[3]");
        check_action(&p.actions[5], RELOAD_ADD, "f", "new in the configuration", NULL, false, false,
                     "every kind [5] (autostart = no)");
        report = report_text(&p);
        is_str(report,
               "{\"added\":[\"e\",\"f\"],\"removed\":[\"b\"],\"restarted\":[{\"name\":\"c\",\"reason\":\"argv "
               "changed\"}],"
               "\"updated\":[{\"name\":\"d\",\"setting\":\"output_limit\"}],\"unchanged\":1,\"not_applied\":[]}",
               "every kind: the report, byte for byte");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);
}

/* Each setting of the process restarts; each other setting applies in place; the reason names it. */
static void test_reasons(void) {
        static const struct {
                const char *line;
                ReloadKind kind;
                const char *setting;
        } cases[] = {
                { "argv = /bin/sh", RELOAD_RESTART, "argv" },
                { "user = nobody", RELOAD_RESTART, "user" },
                { "cwd = /tmp", RELOAD_RESTART, "cwd" },
                { "env = A=1", RELOAD_RESTART, "env" },
                { "connection_file = /tmp/k.json", RELOAD_RESTART, "connection_file" },
                /* The base argv is no kernel auto knows (tcp): ipc is the change. */
                { "transport = ipc", RELOAD_RESTART, "transport" },
                { "memory_max = 100M", RELOAD_RESTART, "memory_max" },
                { "cpu_quota = 50%", RELOAD_RESTART, "cpu_quota" },
                { "tasks_max = 10", RELOAD_RESTART, "tasks_max" },
                { "restart = no", RELOAD_UPDATE, "restart" },
                { "stop_timeout = 3s", RELOAD_UPDATE, "stop_timeout" },
                { "heartbeat_interval = 1s", RELOAD_UPDATE, "heartbeat_interval" },
                { "output_limit = 1k", RELOAD_UPDATE, "output_limit" },
                { "autostart = no", RELOAD_UPDATE, "autostart" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char new_text[256], reason[64], what[96];
                Config *old, *new;
                ReloadPlan p;

                snprintf(new_text, sizeof new_text, DEFAULTS "[context:a]\n%s\n", cases[i].line);
                plan(DEFAULTS "[context:a]\n", new_text, NULL, &old, &new, &p);
                snprintf(reason, sizeof reason, "%s changed", cases[i].setting);
                snprintf(what, sizeof what, "%s, running", cases[i].line);
                is_int(p.n_actions, 1, "%s: one action", what);
                check_action(&p.actions[0], cases[i].kind, "a", reason, cases[i].setting, false,
                             cases[i].kind == RELOAD_RESTART, what);
                reload_plan_done(&p);
                config_free(old);
                config_free(new);
        }
}

/* Whether a kernel runs decides between restart, start and nothing; the report does not depend on it. */
static void test_running(void) {
        static const bool stopped[] = { true };
        static const struct {
                const char *old, *new;
                const bool *stopped;
                ReloadKind kind;
                const char *setting;
                bool start, restart;
                const char *what;
        } cases[] = {
                { "", "argv = /bin/sh", stopped, RELOAD_RESTART, "argv", false, false,
                  "argv changed, stopped: no restart" },
                { "autostart = no", "autostart = yes", stopped, RELOAD_UPDATE, "autostart", true, false,
                  "autostart turned on, stopped: starts" },
                { "autostart = no", "autostart = yes", NULL, RELOAD_UPDATE, "autostart", false, false,
                  "autostart turned on, running: nothing to start" },
                { "autostart = yes", "autostart = no", NULL, RELOAD_UPDATE, "autostart", false, false,
                  "autostart turned off, running: keeps running" },
                { "autostart = no\nargv = /bin/true", "autostart = yes\nargv = /bin/sh", stopped, RELOAD_RESTART,
                  "argv", true, false, "argv changed and autostart turned on, stopped: starts" },
                { "autostart = no\nargv = /bin/true", "autostart = yes\nargv = /bin/sh", NULL, RELOAD_RESTART, "argv",
                  false, true, "argv changed and autostart turned on, running: restarts" },
                { "autostart = no", "autostart = no", stopped, RELOAD_KEEP, NULL, false, false,
                  "autostart = no unchanged, stopped: stays stopped" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char old_text[256], new_text[256], reason[64];
                Config *old, *new;
                ReloadPlan p;

                snprintf(old_text, sizeof old_text, DEFAULTS "[context:a]\n%s\n", cases[i].old);
                snprintf(new_text, sizeof new_text, DEFAULTS "[context:a]\n%s\n", cases[i].new);
                plan(old_text, new_text, cases[i].stopped, &old, &new, &p);
                if (cases[i].setting)
                        snprintf(reason, sizeof reason, "%s changed", cases[i].setting);
                else
                        snprintf(reason, sizeof reason, "no setting changed");
                check_action(&p.actions[0], cases[i].kind, "a", reason, cases[i].setting, cases[i].start,
                             cases[i].restart, cases[i].what);
                reload_plan_done(&p);
                config_free(old);
                config_free(new);
        }
}

/* The removed contexts come first, in the old order; then the new configuration's, sorted by name whatever the
 * file's order; a context that only moved in the file is kept. */
static void test_order(void) {
        static const char old_text[] = DEFAULTS "[context:z]\n[context:m]\n[context:b]\n[context:y]\n";
        static const char new_text[] = DEFAULTS "[context:y]\n[context:n]\n[context:m]\n[context:a]\n";
        static const char *const want[][2] = {
                { "remove", "b" }, { "remove", "z" }, { "add", "a" }, { "keep", "m" }, { "add", "n" }, { "keep", "y" },
        };
        _cleanup_free_ char *report = NULL;
        Config *old, *new;
        ReloadPlan p;

        plan(old_text, new_text, NULL, &old, &new, &p);
        is_int(p.n_actions, ELEMENTSOF(want), "order: one action for each of b, z, a, m, n, y");
        for (size_t i = 0; i < p.n_actions && i < ELEMENTSOF(want); i++) {
                is_str(reload_kind_to_string(p.actions[i].kind), want[i][0], "order [%zu]: %s", i, want[i][0]);
                is_str(p.actions[i].name, want[i][1], "order [%zu]: %s", i, want[i][1]);
        }
        ok(p.actions[3].old != RELOAD_NONE && streq(old->contexts[p.actions[3].old].name, "m") &&
                   streq(new->contexts[p.actions[3].new].name, "m"),
           "order: the indices of a kept context point at it in both configurations");
        report = report_text(&p);
        is_str(report,
               "{\"added\":[\"a\",\"n\"],\"removed\":[\"b\",\"z\"],\"restarted\":[],\"updated\":[],\"unchanged\":2,"
               "\"not_applied\":[]}",
               "order: the report lists names in the plan's order");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);
}

/* From nothing every context is added; to nothing every one is removed. */
static void test_empty(void) {
        static const char some[] = DEFAULTS "[context:a]\n[context:b]\n";
        Config *old, *new;
        ReloadPlan p;

        plan(DEFAULTS, some, NULL, &old, &new, &p);
        is_int(reload_plan_count(&p, RELOAD_ADD), 2, "from no context: both added");
        is_int(p.n_actions, 2, "from no context: nothing else");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);

        plan(some, DEFAULTS, NULL, &old, &new, &p);
        is_int(reload_plan_count(&p, RELOAD_REMOVE), 2, "to no context: both removed");
        is_int(p.n_actions, 2, "to no context: nothing else");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);
}

/* socket, runtime_dir and state_dir need a restart of the daemon: the plan says so, in that order. */
static void test_not_applied(void) {
        char new_text[3 * PATH_MAX], want[4 * PATH_MAX];
        _cleanup_free_ char *report = NULL;
        Config *old, *new;
        ReloadPlan p;

        snprintf(new_text, sizeof new_text,
                 "[supervisor]\nstate_dir = %s/state2\nruntime_dir = %s/run2\nsocket = %s/other.sock\n" DEFAULTS
                 "[context:a]\n",
                 tmpdir, tmpdir, tmpdir);
        plan(DEFAULTS "[context:a]\n", new_text, NULL, &old, &new, &p);
        is_int(strv_length(p.not_applied), 3, "directories changed: three sentences");
        snprintf(want, sizeof want, "[supervisor] socket changed to %s/other.sock: restart kernelsupd to apply it",
                 tmpdir);
        is_str(p.not_applied ? p.not_applied[0] : NULL, want, "not applied [0]: socket");
        snprintf(want, sizeof want, "[supervisor] runtime_dir changed to %s/run2: restart kernelsupd to apply it",
                 tmpdir);
        is_str(p.not_applied ? p.not_applied[1] : NULL, want, "not applied [1]: runtime_dir");
        snprintf(want, sizeof want, "[supervisor] state_dir changed to %s/state2: restart kernelsupd to apply it",
                 tmpdir);
        is_str(p.not_applied ? p.not_applied[2] : NULL, want, "not applied [2]: state_dir");
        report = report_text(&p);
        ok(report && strstr(report, "\"not_applied\":[\"[supervisor] socket changed to "),
           "not applied: the report carries the sentences");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);
}

/* Who may connect to the socket is set when it is bound: a change needs a restart too, and says the new value. */
static void test_socket_access_not_applied(void) {
        Config *old, *new;
        ReloadPlan p;

        plan("[supervisor]\nsocket_user = root\n" DEFAULTS "[context:a]\n",
             "[supervisor]\nsocket_mode = 0600\nsocket_group = root\n" DEFAULTS "[context:a]\n", NULL, &old, &new, &p);
        is_int(strv_length(p.not_applied), 3, "socket access changed: three sentences");
        is_str(p.not_applied ? p.not_applied[0] : NULL,
               "[supervisor] socket_mode changed to 0600: restart kernelsupd to apply it", "not applied: socket_mode");
        is_str(p.not_applied && p.not_applied[0] ? p.not_applied[1] : NULL,
               "[supervisor] socket_user changed to (unset): restart kernelsupd to apply it",
               "not applied: socket_user no longer set");
        is_str(p.not_applied && p.not_applied[0] && p.not_applied[1] ? p.not_applied[2] : NULL,
               "[supervisor] socket_group changed to root: restart kernelsupd to apply it",
               "not applied: socket_group");
        reload_plan_done(&p);
        config_free(old);
        config_free(new);
}

static void test_kind_names(void) {
        static const char *const names[] = { "keep", "add", "remove", "restart", "update" };

        for (int k = 0; k < _RELOAD_KIND_MAX; k++)
                is_str(reload_kind_to_string(k), names[k], "kind %d is %s", k, names[k]);
        ok(!reload_kind_to_string(_RELOAD_KIND_MAX), "a kind out of range has no name");
}

int main(void) {
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %m\n");
                return 1;
        }
        snprintf(main_path, sizeof main_path, "%s/main.ini", tmpdir);
        snprintf(run_dir, sizeof run_dir, "%s/run", tmpdir);
        snprintf(state_dir, sizeof state_dir, "%s/state", tmpdir);
        snprintf(ctx_dir, sizeof ctx_dir, "%s/contexts.d", tmpdir);

        test_unchanged();
        test_every_kind();
        test_reasons();
        test_running();
        test_order();
        test_empty();
        test_not_applied();
        test_socket_access_not_applied();
        test_kind_names();
        /* Loading reads and creates nothing but main.ini. */
        (void) unlink(main_path);
        (void) rmdir(tmpdir);
        return tap_done();
}

/* Tests of metrics.c's OpenMetrics text: label values escaped (backslash,
 * double quote, line feed), also a context name holding all three (the config
 * and the state directory refuse such names, so the context is made here
 * around both), and read back by the real parser (python3-prometheus-client)
 * as that same name; every line a comment or a sample, the daemon-wide series
 * only for a privileged peer, and the text ending in "# EOF". The integration
 * test (test-metrics.py) reads the daemon's text with the parser too. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "context.h"
#include "exec.h"
#include "metrics.h"
#include "util.h"
#include "tap.h"

/* Backslash, quote and line feed: each one escaped, nothing else touched. */
#define WEIRD "we\"ird\\na\nme\xc3\xa9"
#define WEIRD_ESCAPED "we\\\"ird\\\\na\\nme\xc3\xa9"

static char *escaped(const char *s) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        if (!f)
                return NULL;
        metrics_write_label_value(f, s);
        fclose(f);
        return buf;
}

static void test_escape(void) {
        _cleanup_free_ char *a = escaped(WEIRD), *b = escaped("plain-name_1.x"), *c = escaped("");

        is_str(a, WEIRD_ESCAPED, "escape: \\, \" and a line feed are escaped, UTF-8 kept");
        is_str(b, "plain-name_1.x", "escape: a plain name is kept as it is");
        is_str(c, "", "escape: an empty value stays empty");
}

/* Every line is a comment (# TYPE/UNIT/HELP/EOF) or a sample "name{...} value" / "name value". */
static bool lines_well_formed(const char *text, char *bad, size_t size) {
        const char *p = text;

        while (*p) {
                const char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t) (nl - p) : strlen(p);
                bool good = (len > 2 && p[0] == '#' && p[1] == ' ') || strncmp(p, "kernelsup_", 10) == 0;

                if (!good) {
                        snprintf(bad, size, "%.*s", (int) (len < 120 ? len : 120), p);
                        return false;
                }
                if (!nl)
                        break;
                p = nl + 1;
        }
        return true;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), m = strlen(suffix);

        return n >= m && streq(s + n - m, suffix);
}

static void test_daemon_only(void) {
        MetricsDaemon d = { .version = "1.0 \"beta\"", .generation = 7, .resumes = 2, .uptime = 1.5 };
        _cleanup_free_ char *text = NULL, *priv = NULL;
        char bad[128] = "";

        if (!ok(metrics_render(&d, NULL, 0, &text) == 0, "daemon: renders without contexts"))
                return;
        ok(ends_with(text, "\n# EOF\n"), "daemon: ends with # EOF");
        ok(strstr(text, "kernelsup_daemon_info{version=\"1.0 \\\"beta\\\"\"} 1\n") != NULL,
           "daemon: the version label is escaped");
        ok(strstr(text, "kernelsup_daemon_generation 7\n") && strstr(text, "kernelsup_daemon_resumes_total 2\n"),
           "daemon: generation and resumes");
        ok(strstr(text, "kernelsup_contexts{state=\"ready\"} 0\n") != NULL, "daemon: no context is ready");
        ok(!strstr(text, "control_connections") && !strstr(text, "resident_memory"),
           "daemon: an unprivileged peer gets no control connections and no RSS");
        d.privileged = true;
        d.control_connections = 3;
        d.rss = 4096;
        if (!ok(metrics_render(&d, NULL, 0, &priv) == 0, "daemon: renders for a privileged peer"))
                return;
        ok(strstr(priv, "kernelsup_control_connections 3\n") &&
                   strstr(priv, "kernelsup_daemon_resident_memory_bytes 4096\n"),
           "daemon: a privileged peer gets control connections and RSS");
        ok(lines_well_formed(priv, bad, sizeof bad), "daemon: every line is a comment or a sample");
}

/* ---- A context with a name the config would refuse ---- */

/* The state directory refuses such a name too (context_file_name): linked with
 * -Wl,--wrap=context_state_load, the context starts without a state file. */
int __wrap_context_state_load(int state_dirfd, const char *name, ContextState *ret);
int __wrap_context_state_load(int state_dirfd, const char *name, ContextState *ret) {
        return -ENOENT;
}

typedef struct World {
        uv_loop_t loop;
        char dir[64];
        int state_dirfd;
        Config *config;
        ContextHost host;
} World;

static bool host_clock_check(void *userdata) {
        return false;
}
static void host_state_changed(void *userdata, Context *c) {
}
static void host_heartbeat(void *userdata, Context *c) {
}
static void host_save_changed(void *userdata, Context *c) {
}
static int host_taken_ports(void *userdata, const Context *except, uint16_t **ret, size_t *ret_n) {
        *ret = calloc(1, sizeof(uint16_t));
        *ret_n = 0;
        return *ret ? 0 : -ENOMEM;
}

static int world_init(World *w) {
        _cleanup_free_ char *path = NULL, *err = NULL;
        FILE *f;
        int r;

        *w = (World){ .state_dirfd = -1 };
        snprintf(w->dir, sizeof w->dir, "/tmp/test-metrics-XXXXXX");
        if (!mkdtemp(w->dir) || asprintf(&path, "%s/kernelsup.ini", w->dir) < 0)
                return -errno;
        f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs("[defaults]\nargv = /bin/true\nautostart = no\n[context:odd]\n", f);
        fclose(f);
        ConfigDefaults d = { .runtime_dir = w->dir, .state_dir = w->dir, .contexts_dir = "/nonexistent" };
        r = config_load(path, &d, &w->config, &err);
        if (r < 0) {
                printf("# %s\n", err ?: strerror(-r));
                return r;
        }
        w->state_dirfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (w->state_dirfd < 0 || uv_loop_init(&w->loop) < 0)
                return -EIO;
        w->host = (ContextHost){
                .loop = &w->loop,
                .state_dirfd = w->state_dirfd,
                .state_dir = w->dir,
                .runtime_dir = w->dir,
                .port_min = w->config->port_min,
                .port_max = w->config->port_max,
                .boot_id = "00000000-0000-0000-0000-000000000000",
                .clock_check = host_clock_check,
                .state_changed = host_state_changed,
                .heartbeat = host_heartbeat,
                .save_changed = host_save_changed,
                .taken_ports = host_taken_ports,
        };
        return 0;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

static void world_done(World *w) {
        uv_run(&w->loop, UV_RUN_DEFAULT);
        is_int(uv_loop_close(&w->loop), 0, "teardown: every handle is closed (uv_loop_close)");
        config_free(w->config);
        if (w->state_dirfd >= 0)
                close(w->state_dirfd);
        (void) nftw(w->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* What Debian's OpenMetrics parser reads as the context label of the state gauge, as hex (so that a line feed
 * survives); NULL when /usr/bin/python3 has no prometheus_client. */
static char *parsed_context_label(const char *dir, const char *text) {
        static const char script[] =
                "import sys\n"
                "from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n"
                "fams = {f.name: f for f in p(open(sys.argv[1]).read())}\n"
                "print(fams['kernelsup_context_state'].samples[0].labels['context'].encode().hex())\n";
        _cleanup_free_ char *path = NULL, *cmd = NULL;
        char line[512] = "";
        FILE *f, *p;

        if (system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0)
                return NULL;
        if (asprintf(&path, "%s/metrics.txt", dir) < 0 || !(f = fopen(path, "we")))
                return strdup("cannot write the text");
        fputs(text, f);
        fclose(f);
        if (asprintf(&cmd, "/usr/bin/python3 -c \"%s\" %s 2>&1", script, path) < 0 || !(p = popen(cmd, "r")))
                return strdup("cannot run python3");
        if (!fgets(line, sizeof line, p))
                line[0] = '\0';
        pclose(p);
        line[strcspn(line, "\n")] = '\0';
        return strdup(line);
}

static void test_context_name(World *w) {
        ContextConfig cc = *config_find_context(w->config, "odd");
        MetricsDaemon d = { .version = "x" };
        _cleanup_free_ char *text = NULL, *warning = NULL;
        Context *c = NULL;
        char bad[128] = "";
        int n = 0;

        cc.name = (char *) WEIRD;
        if (!ok(context_new(&w->host, &cc, &c, &warning) == 0, "context: made with the name " WEIRD_ESCAPED))
                return;
        if (ok(metrics_render(&d, &c, 1, &text) == 0, "context: renders")) {
                ok(lines_well_formed(text, bad, sizeof bad), "context: no raw line feed splits a sample");
                if (bad[0])
                        printf("#   bad line: %s\n", bad);
                ok(strstr(text, "kernelsup_context_state{context=\"" WEIRD_ESCAPED "\",state=\"stopped\"} 1\n") !=
                           NULL,
                   "context: the state gauge carries the escaped name");
                for (const char *p = text; (p = strstr(p, "context=\"" WEIRD_ESCAPED "\"")); p++)
                        n++;
                /* Every state, death reason and cell status; the buckets, +Inf, count and sum; 8 plain families. */
                is_int(n, _CONTEXT_STATE_MAX + _KERNEL_DEATH_MAX + _EXEC_STATUS_MAX + EXEC_DURATION_BUCKETS + 3 + 8,
                       "context: every series of the context carries the escaped name");
                ok(ends_with(text, "\n# EOF\n"), "context: ends with # EOF");
                _cleanup_free_ char *parsed = parsed_context_label(w->dir, text);
                char want[2 * sizeof WEIRD + 1];
                hex_encode(WEIRD, strlen(WEIRD), want);
                if (parsed)
                        is_str(parsed, want, "context: the OpenMetrics parser reads the name back as it is");
                else
                        ok(1,
                           "context: the OpenMetrics parser reads the name back # SKIP no python3-prometheus-client");
        }
        context_free(c);
}

int main(void) {
        World w;

        test_escape();
        test_daemon_only();
        if (ok(world_init(&w) == 0, "a context's world is set up")) {
                test_context_name(&w);
                world_done(&w);
        }
        return tap_done();
}

/* kernelsupd: parses options, loads the config, runs the supervisor. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "config.h"
#include "log.h"
#include "spawn.h"
#include "supervisor.h"
#include "util.h"

static void help(void) {
        printf("Usage: kernelsupd [OPTIONS]\n"
               "Keep one Jupyter kernel alive per configured context.\n"
               "\n"
               "  -c, --config PATH      the configuration file\n"
               "                         (default: $CONFIGURATION_DIRECTORY/kernelsup.ini under systemd,\n"
               "                         else %s/kernelsup/kernelsup.ini); contexts.d/*.ini\n"
               "                         beside it holds one file per user or conversation\n"
               "  -t, --check-config     validate the configuration (and contexts_dir) and exit\n"
               "      --log-level LEVEL  debug, info, notice, warning or err (default: info)\n"
               "  -h, --help             show this help\n"
               "      --version          show the version\n"
               "\n"
               "Exit status: 0 after a clean shutdown or a valid --check-config, 1 on an error.\n"
               "See kernelsupd(8), kernelsup.ini(5) and kernelctl(1).\n",
               SYSCONFDIR);
}

/* $RUNTIME_DIRECTORY and friends may list several colon-separated paths; the first is ours. */
static char *env_dir(const char *var, const char *suffix, const char *fallback) {
        const char *v = getenv(var);
        char *s;

        if (!v || !*v)
                return strdup(fallback);
        if (asprintf(&s, "%.*s%s", (int) strcspn(v, ":"), v, suffix) < 0)
                return NULL;
        return s;
}

static int parse_log_level(const char *s) {
        static const char *const names[] = { "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug" };

        for (int i = 0; i < (int) ELEMENTSOF(names); i++)
                if (streq(s, names[i]))
                        return i;
        if (streq(s, "error"))
                return LOG_ERR;
        return -EINVAL;
}

int main(int argc, char *argv[]) {
        enum { OPT_LOG_LEVEL = 0x100, OPT_VERSION };
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, NULL, 't' },
                { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, OPT_VERSION },
                {},
        };
        _cleanup_free_ char *config_path = NULL, *runtime_dir = NULL, *state_dir = NULL, *contexts_dir = NULL,
                            *error = NULL;
        bool check_only = false;
        Config *config = NULL;
        Supervisor *s = NULL;
        uv_loop_t loop;
        int c, r;

        while ((c = getopt_long(argc, argv, "c:th", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        free(config_path);
                        config_path = strdup(optarg);
                        break;
                case 't':
                        check_only = true;
                        break;
                case OPT_LOG_LEVEL:
                        r = parse_log_level(optarg);
                        if (r < 0) {
                                fprintf(stderr, "kernelsupd: unknown log level '%s'\n", optarg);
                                return 1;
                        }
                        log_max_level = r;
                        break;
                case 'h':
                        help();
                        return 0;
                case OPT_VERSION:
                        printf("kernelsupd %s\n", PACKAGE_VERSION);
                        return 0;
                default:
                        fprintf(stderr, "Try 'kernelsupd --help'.\n");
                        return 1;
                }
        if (optind < argc) {
                fprintf(stderr, "kernelsupd: unexpected argument '%s'\nTry 'kernelsupd --help'.\n", argv[optind]);
                return 1;
        }

        if (!config_path)
                config_path =
                        env_dir("CONFIGURATION_DIRECTORY", "/kernelsup.ini", SYSCONFDIR "/kernelsup/kernelsup.ini");
        runtime_dir = env_dir("RUNTIME_DIRECTORY", "", RUNSTATEDIR "/kernelsup");
        state_dir = env_dir("STATE_DIRECTORY", "", LOCALSTATEDIR "/lib/kernelsup");
        /* contexts.d lives beside the main file, wherever that is (the unit names it; packaging may not be /etc). */
        {
                _cleanup_free_ char *dir = NULL;
                const char *base;
                if (path_split(config_path, &dir, &base) >= 0 && asprintf(&contexts_dir, "%s/contexts.d", dir) < 0)
                        contexts_dir = NULL;
        }
        if (!config_path || !runtime_dir || !state_dir || !contexts_dir) {
                fprintf(stderr, "kernelsupd: out of memory\n");
                return 1;
        }
        ConfigDefaults defaults = {
                .runtime_dir = runtime_dir,
                .state_dir = state_dir,
                .contexts_dir = contexts_dir,
        };
        r = config_load(config_path, &defaults, &config, &error);
        if (r < 0) {
                if (error)
                        log_error("%s", error);
                else
                        log_error_errno(r, "Failed to load %s: %m", config_path);
                return 1;
        }
        if (check_only) {
                printf("%s: OK (%zu context%s)\n", config_path, config->n_contexts,
                       config->n_contexts == 1 ? "" : "s");
                /* Who may connect: the defaults are not in the file either. */
                printf("  control socket %s: mode %04o, owner %s, group %s\n", config->socket_path,
                       (unsigned) config->socket_mode, config->socket_user ?: "(the daemon's)",
                       config->socket_group ?: "(the daemon's)");
                /* Which transport each context's kernel gets, and why: auto's choice is not in the file. */
                for (size_t i = 0; i < config->n_contexts; i++)
                        printf("  %s: transport %s (%s)\n", config->contexts[i].name,
                               transport_to_string(config->contexts[i].transport), config->contexts[i].transport_why);
                /* A spec that its context's user can change fails that context alone (config.h): not an error. */
                for (size_t i = 0; i < config->n_contexts; i++)
                        if (config->contexts[i].kernel_error)
                                log_warning("%s: will fail to start: %s", config->contexts[i].name,
                                            config->contexts[i].kernel_error);
                config_free(config);
                return 0;
        }

        /* Buffers of 128 KiB or more (a request line, a cell's code, a message of the kernel) are mmapped, so
         * freeing them gives their memory back; glibc would otherwise raise this threshold to the largest
         * buffer freed, keeping the next ones in a heap it rarely returns. */
        (void) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        /* A peer that hangs up mid-reply must not end us; writes see EPIPE instead. */
        signal(SIGPIPE, SIG_IGN);
        /* About ten descriptors per kernel (sockets, pidfd, output pipe): raise the soft limit to the hard one,
         * as systemd advises; spawn.c gives the kernels the original soft limit back. */
        spawn_raise_nofile();
        r = supervisor_block_signals();
        if (r < 0) {
                log_error_errno(r, "Failed to block signals: %m");
                return 1;
        }
        uv_loop_init(&loop);
        r = supervisor_new(&loop, config, &defaults, &s, &error);
        if (r < 0) {
                if (error)
                        log_error("%s", error);
                else
                        log_error_errno(r, "Failed to start: %m");
                uv_loop_close(&loop);
                return 1;
        }
        r = supervisor_run(s);
        supervisor_free(s);
        if (uv_loop_close(&loop) < 0)
                log_debug("loop closed with handles still open");
        return r;
}

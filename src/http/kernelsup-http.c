/* kernelsup-http: the HTTP front end of kernelsupd (kernelsup-http(8), doc/design.md section 11). main parses the
 * options, opens the listeners and runs the loop; the server is http*.c, the routes api*.c and e2b.c. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include "api.h"
#include "http.h"
#include "listen.h"
#include "log.h"
#include "util.h"

#define DEFAULT_SOCKET RUNSTATEDIR "/kernelsup/control.sock"
#define MAX_LISTENERS 16
#define MAX_NAMES 32
#define TOKEN_MAX 4096

typedef struct Options {
        const char *listen[MAX_LISTENERS];
        size_t n_listen;
        char *hosts[MAX_NAMES + 2 * MAX_LISTENERS + 1];
        size_t n_hosts;
        char *origins[MAX_NAMES + 1];
        size_t n_origins;
        const char *token_file;
        bool no_auth;
        HttpConfig config;
} Options;

static void help(void) {
        printf("Usage: kernelsup-http [OPTIONS]\n"
               "Serves kernelsupd's contexts over HTTP: the native API (/v1) and E2B's.\n\n"
               "  --listen ADDR          127.0.0.1:PORT, [::1]:PORT or unix:PATH (repeatable; with systemd\n"
               "                         socket activation, the sockets passed come first)\n"
               "  --socket PATH          kernelsupd's control socket (default: $KERNELSUP_SOCKET, else\n"
               "                         " DEFAULT_SOCKET ")\n"
               "  --token-file PATH      the token TCP clients must give; only its owner may read it\n"
               "  --no-auth              serve TCP without a token (loopback addresses only)\n"
               "  --allow-host NAME      a Host header may also name NAME (repeatable)\n"
               "  --allow-origin ORIGIN  a browser may come from ORIGIN (repeatable; none by default)\n"
               "  --max-body SIZE        bytes of a request body (default 1M)\n"
               "  --max-header SIZE      memory per connection for the request line and headers (default 16K)\n"
               "  --max-connections N    connections in all, per listener (default 256)\n"
               "  --max-per-client N     connections per client address (default 32)\n"
               "  --request-timeout SEC  for a request to arrive whole, and for an idle connection (default 30)\n"
               "  --stream-buffer SIZE   bytes a stream holds for a slow reader (default 1M)\n"
               "  --log-level LEVEL      err, warning, notice, info or debug (default info)\n"
               "  -h, --help             this help\n"
               "      --version          the version\n");
}

_printf_(1, 2) static int fail_usage(const char *fmt, ...) {
        va_list ap;

        fputs("kernelsup-http: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'kernelsup-http --help'.\n", stderr);
        return 2;
}

/* The token: the file's first line, of a regular file that is ours and that no one else may read. */
static int read_token(const char *path, char **ret) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        char buf[TOKEN_MAX + 1];
        struct stat st;
        ssize_t n;

        if (fd < 0)
                return log_error_errno(errno, "Cannot open the token file %s: %m", path);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return log_error_errno(EINVAL, "The token file %s is not a regular file", path);
        if (st.st_uid != geteuid() || (st.st_mode & 0077)) {
                log_error("The token file %s must belong to uid %u and be readable by it alone (chmod 600), "
                          "not uid %u with mode %04o",
                          path, (unsigned) geteuid(), (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777));
                return -EPERM;
        }
        n = read(fd, buf, sizeof buf);
        if (n < 0)
                return log_error_errno(errno, "Cannot read the token file %s: %m", path);
        buf[n] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        if (n > TOKEN_MAX || !*buf) {
                log_error("The token file %s must hold one line of 1 to %d bytes", path, TOKEN_MAX);
                return -EINVAL;
        }
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

static int parse_size_opt(const char *v, size_t *ret) {
        const char *why;

        return parse_size(v, ret, &why);
}

static int parse_options(int argc, char **argv, Options *o) {
        enum {
                ARG_LISTEN = 0x100,
                ARG_SOCKET,
                ARG_TOKEN_FILE,
                ARG_NO_AUTH,
                ARG_ALLOW_HOST,
                ARG_ALLOW_ORIGIN,
                ARG_MAX_BODY,
                ARG_MAX_HEADER,
                ARG_MAX_CONN,
                ARG_MAX_PER_CLIENT,
                ARG_REQUEST_TIMEOUT,
                ARG_STREAM_BUFFER,
                ARG_LOG_LEVEL,
                ARG_VERSION
        };
        static const struct option options[] = {
                { "listen", required_argument, NULL, ARG_LISTEN },
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "token-file", required_argument, NULL, ARG_TOKEN_FILE },
                { "no-auth", no_argument, NULL, ARG_NO_AUTH },
                { "allow-host", required_argument, NULL, ARG_ALLOW_HOST },
                { "allow-origin", required_argument, NULL, ARG_ALLOW_ORIGIN },
                { "max-body", required_argument, NULL, ARG_MAX_BODY },
                { "max-header", required_argument, NULL, ARG_MAX_HEADER },
                { "max-connections", required_argument, NULL, ARG_MAX_CONN },
                { "max-per-client", required_argument, NULL, ARG_MAX_PER_CLIENT },
                { "request-timeout", required_argument, NULL, ARG_REQUEST_TIMEOUT },
                { "stream-buffer", required_argument, NULL, ARG_STREAM_BUFFER },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        HttpLimits *l = &o->config.limits;
        unsigned long long v;
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case ARG_LISTEN:
                        if (o->n_listen == MAX_LISTENERS)
                                return fail_usage("at most %s --listen addresses", "16");
                        o->listen[o->n_listen++] = optarg;
                        break;
                case ARG_SOCKET:
                        o->config.control_socket = optarg;
                        break;
                case ARG_TOKEN_FILE:
                        o->token_file = optarg;
                        break;
                case ARG_NO_AUTH:
                        o->no_auth = true;
                        break;
                case ARG_ALLOW_HOST:
                        if (o->n_hosts == MAX_NAMES)
                                return fail_usage("at most %s --allow-host names", "32");
                        o->hosts[o->n_hosts++] = optarg;
                        break;
                case ARG_ALLOW_ORIGIN:
                        if (o->n_origins == MAX_NAMES)
                                return fail_usage("at most %s --allow-origin origins", "32");
                        o->origins[o->n_origins++] = optarg;
                        break;
                case ARG_MAX_BODY:
                        if (parse_size_opt(optarg, &l->max_body) < 0)
                                return fail_usage("invalid --max-body: %s (a size from 1K to 1G)", optarg);
                        break;
                case ARG_MAX_HEADER:
                        if (parse_size_opt(optarg, &l->header_pool) < 0 || l->header_pool > 1024 * 1024)
                                return fail_usage("invalid --max-header: %s (a size from 1K to 1M)", optarg);
                        break;
                case ARG_STREAM_BUFFER:
                        if (parse_size_opt(optarg, &l->stream_buffer) < 0)
                                return fail_usage("invalid --stream-buffer: %s (a size from 1K to 1G)", optarg);
                        break;
                case ARG_MAX_CONN:
                case ARG_MAX_PER_CLIENT:
                case ARG_REQUEST_TIMEOUT:
                        if (parse_uint(optarg, 1, c == ARG_REQUEST_TIMEOUT ? 3600 : 100000, &v) < 0)
                                return fail_usage("invalid number: %s", optarg);
                        *(c == ARG_MAX_CONN         ? &l->max_connections
                          : c == ARG_MAX_PER_CLIENT ? &l->max_per_client
                                                    : &l->request_timeout) = (unsigned) v;
                        break;
                case ARG_LOG_LEVEL: {
                        static const char *const levels[] = { [LOG_ERR] = "err",
                                                              [LOG_WARNING] = "warning",
                                                              [LOG_NOTICE] = "notice",
                                                              [LOG_INFO] = "info",
                                                              [LOG_DEBUG] = "debug" };
                        int lv = -1;
                        for (int i = 0; i < (int) ELEMENTSOF(levels); i++)
                                if (levels[i] && streq(levels[i], optarg))
                                        lv = i;
                        if (lv < 0)
                                return fail_usage("invalid --log-level: %s", optarg);
                        log_max_level = lv;
                        break;
                }
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        puts(PACKAGE_VERSION);
                        return 0;
                default:
                        return 2;
                }
        if (optind < argc)
                return fail_usage("unexpected argument: %s", argv[optind]);
        return -1;
}

/* The listeners: systemd's first, then --listen's; the names a Host header may give; the rule on tokens. */
static int open_listeners(Options *o, Listener *ls, size_t *ret_n) {
        int n_fds = sd_listen_fds(1);
        size_t n = 0;
        bool tcp = false, exposed = false;
        const char *why;
        int r;

        for (int i = 0; i < n_fds && n < MAX_LISTENERS; i++) {
                r = listen_adopt(SD_LISTEN_FDS_START + i, &ls[n]);
                if (r < 0)
                        return log_error_errno(r, "Socket %d passed by systemd is not a listening stream socket",
                                               SD_LISTEN_FDS_START + i);
                n++;
        }
        for (size_t i = 0; i < o->n_listen && n < MAX_LISTENERS; i++) {
                if (listen_parse(o->listen[i], &ls[n], &why) < 0) {
                        log_error("Invalid --listen %s: %s", o->listen[i], why);
                        return -EINVAL;
                }
                r = listen_open(&ls[n]);
                if (r < 0)
                        return log_error_errno(r, "Cannot listen on %s: %m", o->listen[i]);
                n++;
        }
        if (n == 0) {
                log_error("Nothing to listen on: give --listen ADDR, or start it from a systemd socket");
                return -EINVAL;
        }
        for (size_t i = 0; i < n; i++) {
                if (ls[i].kind != LISTEN_TCP)
                        continue;
                tcp = true;
                exposed |= !ls[i].loopback;
                o->hosts[o->n_hosts++] = ls[i].host;
                if (ls[i].loopback)
                        o->hosts[o->n_hosts++] = (char *) "localhost";
        }
        if (o->no_auth && exposed) {
                log_error("--no-auth is refused with an address other than loopback: anyone who reaches it would run "
                          "code as uid %u",
                          (unsigned) getuid());
                return -EINVAL;
        }
        if (tcp && !o->no_auth && !o->token_file) {
                log_error("A TCP listener needs --token-file PATH (or --no-auth, on loopback only)");
                return -EINVAL;
        }
        *ret_n = n;
        return 0;
}

typedef struct Main {
        uv_loop_t *loop;
        HttpServer *server;
        uv_signal_t sigterm, sigint;
} Main;

static void on_signal(uv_signal_t *s, int signum) {
        Main *m = s->data;

        log_info("Signal %s: stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
        (void) sd_notify(0, "STOPPING=1");
        uv_close((uv_handle_t *) &m->sigterm, NULL);
        uv_close((uv_handle_t *) &m->sigint, NULL);
        if (m->server)
                http_server_free(TAKE_PTR(m->server), NULL, NULL);
}

int main(int argc, char **argv) {
        static HttpRoute routes[64];
        Options o = {
                .config.limits = { .max_body = 1024 * 1024,
                                   .header_pool = 16 * 1024,
                                   .max_connections = 256,
                                   .max_per_client = 32,
                                   .request_timeout = 30,
                                   .stream_buffer = 1024 * 1024 },
        };
        Listener ls[MAX_LISTENERS];
        _cleanup_free_ char *token = NULL;
        const char *env = getenv("KERNELSUP_SOCKET");
        Main m = { .loop = uv_default_loop() };
        size_t n = 0;
        int r;

        r = parse_options(argc, argv, &o);
        if (r >= 0)
                return r;
        if (!o.config.control_socket)
                o.config.control_socket = env && *env ? env : DEFAULT_SOCKET;
        signal(SIGPIPE, SIG_IGN);
        if (o.token_file && read_token(o.token_file, &token) < 0)
                return 1;
        if (o.no_auth && token) {
                log_error("--no-auth and --token-file exclude each other");
                return 2;
        }
        if (open_listeners(&o, ls, &n) < 0)
                return 1;
        o.config.auth = (AuthPolicy){ .token = token, .hosts = o.hosts, .origins = o.origins };
        for (size_t i = 0; i < api_v1_n_routes; i++)
                routes[o.config.n_routes++] = api_v1_routes[i];
        for (size_t i = 0; i < e2b_n_routes; i++)
                routes[o.config.n_routes++] = e2b_routes[i];
        o.config.routes = routes;
        r = http_server_new(m.loop, &o.config, ls, n, &m.server);
        if (r < 0) {
                log_error_errno(r, "Cannot start serving: %m");
                http_server_free(m.server, NULL, NULL);
                (void) uv_run(m.loop, UV_RUN_DEFAULT);
                return 1;
        }
        if (o.no_auth)
                log_warning("Serving without authentication (--no-auth): every local user can run code as uid %u",
                            (unsigned) getuid());
        for (size_t i = 0; i < n; i++)
                log_info("Listening on %s", ls[i].name);
        (void) uv_signal_init(m.loop, &m.sigterm);
        (void) uv_signal_init(m.loop, &m.sigint);
        m.sigterm.data = m.sigint.data = &m;
        (void) uv_signal_start(&m.sigterm, on_signal, SIGTERM);
        (void) uv_signal_start(&m.sigint, on_signal, SIGINT);
        (void) sd_notify(0, "READY=1");
        (void) uv_run(m.loop, UV_RUN_DEFAULT);
        (void) uv_loop_close(m.loop);
        return 0;
}

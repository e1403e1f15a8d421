/* Connection information: format/parse, the atomic 0600 file, port probing and allocation, the ipc layout. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "connfile.h"
#include "tap.h"
#include "util.h"

/* Far below the ephemeral range, where the daemon allocates too. */
/* Outside the 20000-29999 slots the integration tests take (harness.py), which run in parallel. */
#define PORT_MIN 30100
#define PORT_MAX 30199

static char tmpdir[] = "/tmp/test-connfile.XXXXXX";

static ConnectionInfo sample(void) {
        ConnectionInfo ci = { .ip = "127.0.0.1", .ports = { 27101, 27102, 27103, 27104, 27105 } };

        memset(ci.key, 'a', KEY_HEX_LEN);
        memcpy(ci.key, "0123456789abcdef", 16);
        ci.key[KEY_HEX_LEN] = '\0';
        return ci;
}

static bool ci_equal(const ConnectionInfo *a, const ConnectionInfo *b) {
        return streq(a->ip, b->ip) && streq(a->key, b->key) && memcmp(a->ports, b->ports, sizeof a->ports) == 0;
}

static void test_channels(void) {
        static const char *const want[] = { "shell", "iopub", "stdin", "control", "hb" };

        for (Channel c = 0; c < _CHANNEL_MAX; c++)
                is_str(channel_to_string(c), want[c], "channel_to_string(%d)", (int) c);
        ok(channel_to_string(_CHANNEL_MAX) == NULL, "channel_to_string out of range is NULL");
}

static void test_key(void) {
        char a[KEY_HEX_LEN + 1], b[KEY_HEX_LEN + 1];
        bool hex = true;

        is_int(connection_key_new(a), 0, "connection_key_new");
        is_int(connection_key_new(b), 0, "connection_key_new again");
        is_int(strlen(a), KEY_HEX_LEN, "key is 64 characters");
        for (const char *p = a; *p; p++)
                hex = hex && (isdigit((unsigned char) *p) || (*p >= 'a' && *p <= 'f'));
        ok(hex, "key is lower-case hex");
        ok(!streq(a, b), "two keys differ");
}

static void test_format(void) {
        ConnectionInfo ci = sample(), back;
        _cleanup_free_ char *s = NULL;
        json_auto_t *j = NULL;
        size_t n;

        s = connection_info_format(&ci);
        ok(s != NULL, "format");
        if (!s)
                return;
        n = strlen(s);
        ok(n > 0 && s[n - 1] == '\n', "format ends in a newline");
        ok(strstr(s, "\n  \"control_port\"") != NULL, "format is indented by 2");
        {
                static const char *const order[] = { "\"control_port\"", "\"hb_port\"",          "\"iopub_port\"",
                                                     "\"ip\"",           "\"kernel_name\"",      "\"key\"",
                                                     "\"shell_port\"",   "\"signature_scheme\"", "\"stdin_port\"",
                                                     "\"transport\"" };
                bool sorted = true;
                for (size_t i = 0; i + 1 < ELEMENTSOF(order); i++) {
                        const char *a = strstr(s, order[i]), *b = strstr(s, order[i + 1]);
                        sorted = sorted && a && b && a < b;
                }
                ok(sorted, "format sorts keys");
        }

        j = json_loads(s, 0, NULL);
        ok(j && json_is_object(j), "format is a JSON object");
        if (!j)
                return;
        is_int(json_object_size(j), 10, "format has exactly 10 keys");
        ok(json_is_integer(json_object_get(j, "shell_port")) &&
                   json_integer_value(json_object_get(j, "shell_port")) == 27101,
           "shell_port is the integer 27101");
        ok(json_is_integer(json_object_get(j, "iopub_port")) &&
                   json_integer_value(json_object_get(j, "iopub_port")) == 27102,
           "iopub_port");
        ok(json_is_integer(json_object_get(j, "stdin_port")) &&
                   json_integer_value(json_object_get(j, "stdin_port")) == 27103,
           "stdin_port");
        ok(json_is_integer(json_object_get(j, "control_port")) &&
                   json_integer_value(json_object_get(j, "control_port")) == 27104,
           "control_port");
        ok(json_is_integer(json_object_get(j, "hb_port")) &&
                   json_integer_value(json_object_get(j, "hb_port")) == 27105,
           "hb_port");
        is_str(json_string_value(json_object_get(j, "ip")), "127.0.0.1", "ip");
        is_str(json_string_value(json_object_get(j, "key")), ci.key, "key");
        is_str(json_string_value(json_object_get(j, "transport")), "tcp", "transport");
        is_str(json_string_value(json_object_get(j, "signature_scheme")), "hmac-sha256", "signature_scheme");
        is_str(json_string_value(json_object_get(j, "kernel_name")), "python3", "kernel_name");

        is_int(connection_info_parse(s, &back), 0, "parse what format wrote");
        ok(ci_equal(&ci, &back), "format/parse round trip");
}

static void test_parse_good(void) {
        /* What ipykernel 6.17 writes when given a uuid key: kernel_name empty, key not hex. */
        static const char ipykernel[] =
                "{\n  \"shell_port\": 40001,\n  \"iopub_port\": 40002,\n  \"stdin_port\": 40003,\n"
                "  \"control_port\": 40004,\n  \"hb_port\": 40005,\n  \"ip\": \"127.0.0.1\",\n"
                "  \"key\": \"5d1e6a50-1f5e-4e3c-9d55-8a3bfa3f5a2b\",\n  \"transport\": \"tcp\",\n"
                "  \"signature_scheme\": \"hmac-sha256\",\n  \"kernel_name\": \"\"\n}";
        ConnectionInfo ci;
        char text[512];
        int r;

        r = connection_info_parse(ipykernel, &ci);
        is_int(r, 0, "parse an ipykernel-written file");
        if (r == 0) {
                is_int(ci.ports[CHANNEL_SHELL], 40001, "shell port");
                is_int(ci.ports[CHANNEL_IOPUB], 40002, "iopub port");
                is_int(ci.ports[CHANNEL_STDIN], 40003, "stdin port");
                is_int(ci.ports[CHANNEL_CONTROL], 40004, "control port");
                is_int(ci.ports[CHANNEL_HB], 40005, "hb port");
                is_str(ci.key, "5d1e6a50-1f5e-4e3c-9d55-8a3bfa3f5a2b", "uuid key kept as text");
        }

        r = connection_info_parse("{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                                  "\"hb_port\":65535,\"ip\":\"::1\",\"key\":\"\",\"extra\":[1]}",
                                  &ci);
        is_int(r, 0, "empty key, no transport/scheme/kernel_name, extra keys, ports 1 and 65535");
        if (r == 0) {
                is_str(ci.key, "", "empty key");
                is_str(ci.ip, "::1", "ipv6 ip");
                is_int(ci.ports[CHANNEL_HB], 65535, "port 65535");
        }

        /* The longest lengths allowed: a 45-character ip, a 64-character key. */
        snprintf(text, sizeof text,
                 "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5,"
                 "\"ip\":\"%045d\",\"key\":\"%064d\"}",
                 0, 0);
        r = connection_info_parse(text, &ci);
        is_int(r, 0, "45-character ip and 64-character key");
        if (r == 0) {
                is_int(strlen(ci.ip), 45, "ip length 45");
                is_int(strlen(ci.key), 64, "key length 64");
        }
}

static void test_parse_bad(void) {
        static const char *const ports_ok = "\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,";
        static const struct {
                const char *what, *tail;
                bool raw; /* the whole text, not a tail after ports_ok */
        } cases[] = {
                { "empty text", "", true },
                { "not JSON", "shell_port=1", true },
                { "truncated", "{\"shell_port\":1,\"iopub_port\":2,", true },
                { "an array", "[1,2,3]", true },
                { "a string", "\"x\"", true },
                { "missing shell_port",
                  "{\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5,\"ip\":\"1.2.3.4\",\"key\":"
                  "\"k\"}",
                  true },
                { "missing hb_port", "\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port as string", "\"hb_port\":\"5\",\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port as real", "\"hb_port\":5.0,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port null", "\"hb_port\":null,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port 0", "\"hb_port\":0,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port -1", "\"hb_port\":-1,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port 65536", "\"hb_port\":65536,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "port huge", "\"hb_port\":18446744073709551621,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "missing ip", "\"hb_port\":5,\"key\":\"k\"}" },
                { "ip a number", "\"hb_port\":5,\"ip\":127,\"key\":\"k\"}" },
                { "ip empty", "\"hb_port\":5,\"ip\":\"\",\"key\":\"k\"}" },
                { "ip 46 characters", "\"hb_port\":5,\"ip\":\"0000000000000000000000000000000000000000000000\","
                                      "\"key\":\"k\"}" },
                { "ip with a NUL", "\"hb_port\":5,\"ip\":\"127.0.0.1\\u0000x\",\"key\":\"k\"}" },
                { "missing key", "\"hb_port\":5,\"ip\":\"127.0.0.1\"}" },
                { "key a number", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":5}" },
                { "key null", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":null}" },
                { "key 65 characters",
                  "\"hb_port\":5,\"ip\":\"127.0.0.1\","
                  "\"key\":\"00000000000000000000000000000000000000000000000000000000000000000\"}" },
                { "key with a NUL", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"ab\\u0000cd\"}" },
                { "transport ipc with an address, not a path",
                  "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\",\"transport\":\"ipc\"}" },
                { "transport a number", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\",\"transport\":1}" },
                { "scheme hmac-md5",
                  "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\",\"signature_scheme\":\"hmac-md5\"}" },
                { "kernel_name a number", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\",\"kernel_name\":3}" },
                { "duplicate key", "\"hb_port\":5,\"hb_port\":6,\"ip\":\"127.0.0.1\",\"key\":\"k\"}" },
                { "trailing garbage", "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\"} x" },
        };
        ConnectionInfo sentinel, ci;
        char text[1024];

        /* The reference: the good tail parses, so each failure below is due to its one change. */
        snprintf(text, sizeof text, "{%s%s", ports_ok, "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\"}");
        is_int(connection_info_parse(text, &ci), 0, "reference text parses");

        memset(&sentinel, 0xa5, sizeof sentinel);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                if (cases[i].raw)
                        snprintf(text, sizeof text, "%s", cases[i].tail);
                else
                        snprintf(text, sizeof text, "{%s%s", ports_ok, cases[i].tail);
                ci = sentinel;
                is_int(connection_info_parse(text, &ci), -EBADMSG, "parse refuses %s", cases[i].what);
                ok(memcmp(&ci, &sentinel, sizeof ci) == 0, "ret untouched after %s", cases[i].what);
        }
}

static int file_mode(const char *path, struct stat *st) {
        return lstat(path, st) < 0 ? -errno : 0;
}

/* Counts entries of dir other than . and .., and those whose name starts with ".#" (temp files). */
static int count_entries(const char *dir, int *ret_temp) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int n = 0, t = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                n++;
                if (strncmp(de->d_name, ".#", 2) == 0)
                        t++;
        }
        closedir(d);
        *ret_temp = t;
        return n;
}

static bool have_jupyter_client(void) {
        return access("/usr/bin/python3", X_OK) == 0 &&
               system("/usr/bin/python3 -c 'import jupyter_client' >/dev/null 2>&1") == 0;
}

static void test_python_loads(const char *path, const ConnectionInfo *ci) {
        char cmd[1024], line[256] = "", want[128];
        FILE *f;
        int status;

        if (!have_jupyter_client()) {
                ok(1, "# SKIP /usr/bin/python3 has no jupyter_client");
                return;
        }
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import json,sys; from jupyter_client import BlockingKernelClient as C; "
                 "c=C(); c.load_connection_file(sys.argv[1]); print(c.shell_port, c.session.key.decode())' '%s'",
                 path);
        f = popen(cmd, "r");
        ok(f != NULL, "popen python3");
        if (!f)
                return;
        if (!fgets(line, sizeof line, f))
                line[0] = '\0';
        status = pclose(f);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "jupyter_client loaded the file");
        line[strcspn(line, "\n")] = '\0';
        snprintf(want, sizeof want, "%u %s", (unsigned) ci->ports[CHANNEL_SHELL], ci->key);
        is_str(line, want, "jupyter_client sees our shell port and key");
}

static void test_file_write(void) {
        ConnectionInfo ci = sample(), back;
        char path[512], victim[256], link[256], real[128], linked[128];
        _cleanup_free_ char *text = NULL;
        struct stat st;
        uid_t uid = geteuid() == 0 ? 4321 : getuid();
        gid_t gid = geteuid() == 0 ? 8765 : getgid();
        int temp = -1, r;

        snprintf(path, sizeof path, "%s/kernel.json", tmpdir);
        is_int(connection_file_write(path, &ci, uid, gid), 0, "connection_file_write");
        is_int(file_mode(path, &st), 0, "stat the file");
        ok(S_ISREG(st.st_mode), "it is a regular file");
        is_int(st.st_mode & 07777, 0600, "mode 0600");
        is_int(st.st_uid, uid, "owner uid %u", (unsigned) uid);
        is_int(st.st_gid, gid, "owner gid %u", (unsigned) gid);
        r = read_file(path, 4096, &text, NULL);
        is_int(r, 0, "read it back");
        if (r == 0) {
                is_int(connection_info_parse(text, &back), 0, "parse it");
                ok(ci_equal(&ci, &back), "file content round-trips");
        }
        test_python_loads(path, &ci);

        /* Overwriting keeps it a 0600 file with the new content. */
        ci.ports[CHANNEL_SHELL] = 27111;
        is_int(connection_file_write(path, &ci, (uid_t) -1, (gid_t) -1), 0, "overwrite, owner left as is");
        free(text);
        text = NULL;
        is_int(read_file(path, 4096, &text, NULL), 0, "read the new file");
        ok(text && connection_info_parse(text, &back) == 0 && back.ports[CHANNEL_SHELL] == 27111,
           "new content is there");

        /* A symlink planted at the final name is replaced, and its target is left alone. */
        snprintf(victim, sizeof victim, "%s/victim", tmpdir);
        snprintf(link, sizeof link, "%s/planted.json", tmpdir);
        {
                FILE *f = fopen(victim, "we");
                ok(f && fputs("precious\n", f) >= 0 && fclose(f) == 0, "create victim file");
        }
        chmod(victim, 0644);
        ok(symlink(victim, link) == 0, "plant symlink at the target name");
        is_int(connection_file_write(link, &ci, (uid_t) -1, (gid_t) -1), 0, "write over a symlink");
        free(text);
        text = NULL;
        is_int(read_file(victim, 4096, &text, NULL), 0, "read victim");
        is_str(text, "precious\n", "victim content untouched");
        is_int(file_mode(victim, &st), 0, "stat victim");
        is_int(st.st_mode & 07777, 0644, "victim mode untouched");
        is_int(file_mode(link, &st), 0, "lstat target");
        ok(S_ISREG(st.st_mode), "target is now a regular file, not a symlink");
        is_int(st.st_mode & 07777, 0600, "target mode 0600");

        /* A symlinked parent directory is refused outright. */
        snprintf(real, sizeof real, "%s/realdir", tmpdir);
        snprintf(linked, sizeof linked, "%s/linkdir", tmpdir);
        ok(mkdir(real, 0700) == 0 && symlink(real, linked) == 0, "make a symlinked directory");
        snprintf(path, sizeof path, "%s/kernel.json", linked);
        r = connection_file_write(path, &ci, (uid_t) -1, (gid_t) -1);
        ok(r == -ELOOP || r == -ENOTDIR, "symlinked parent refused (got %d)", r);
        snprintf(path, sizeof path, "%s/kernel.json", real);
        ok(access(path, F_OK) < 0 && errno == ENOENT, "nothing written through the symlinked parent");

        snprintf(path, sizeof path, "%s/missing/kernel.json", tmpdir);
        is_int(connection_file_write(path, &ci, (uid_t) -1, (gid_t) -1), -ENOENT, "missing parent: -ENOENT");

        /* kernel.json, victim, planted.json, realdir, linkdir and nothing else. */
        is_int(count_entries(tmpdir, &temp), 5, "no stray files in the directory");
        is_int(temp, 0, "no temp files left behind");
}

static int listen_on(const char *ip, uint16_t port, uint16_t *ret_port) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
        socklen_t len = sizeof sa;
        int fd;

        inet_pton(AF_INET, ip, &sa.sin_addr);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 1) < 0 ||
            getsockname(fd, (struct sockaddr *) &sa, &len) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        if (ret_port)
                *ret_port = ntohs(sa.sin_port);
        return fd;
}

static void test_port_is_free(void) {
        uint16_t port = 0;
        int fd;

        is_int(port_is_free("not-an-ip", 27100), -EINVAL, "bad ip: -EINVAL");
        is_int(port_is_free("127.0.0.1", 0), -EINVAL, "port 0: -EINVAL");
        is_int(port_is_free("192.0.2.1", 27100), -EADDRNOTAVAIL, "non-local ip: -EADDRNOTAVAIL");

        fd = listen_on("127.0.0.1", 0, &port);
        ok(fd >= 0, "listen on an ephemeral port");
        if (fd < 0)
                return;
        is_int(port_is_free("127.0.0.1", port), 0, "a listening port is not free");
        is_int(port_is_free("0.0.0.0", port), 0, "nor on the wildcard address");
        close(fd);
        is_int(port_is_free("127.0.0.1", port), 1, "free again once closed");

        fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                ok(1, "# SKIP no IPv6");
                return;
        }
        close(fd);
        is_int(port_is_free("::1", port), 1, "IPv6 loopback port is free");
}

static uint32_t fnv1a_ref(const char *s) {
        uint32_t h = 0x811c9dc5u;

        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 0x01000193u;
        return h;
}

static bool ports_valid(const uint16_t p[_CHANNEL_MAX], uint16_t min, uint16_t max) {
        for (int i = 0; i < _CHANNEL_MAX; i++) {
                if (p[i] < min || p[i] > max)
                        return false;
                for (int k = 0; k < i; k++)
                        if (p[k] == p[i])
                                return false;
        }
        return true;
}

static bool ports_intersect(const uint16_t *a, size_t na, const uint16_t *b, size_t nb) {
        for (size_t i = 0; i < na; i++)
                for (size_t k = 0; k < nb; k++)
                        if (a[i] == b[k])
                                return true;
        return false;
}

static void test_ports_allocate(void) {
        uint16_t a[_CHANNEL_MAX], b[_CHANNEL_MAX], c[_CHANNEL_MAX], sentinel[_CHANNEL_MAX];
        uint16_t taken[2];
        int r, fd;

        is_int(fnv1a_ref("a"), 0xe40c292c, "reference FNV-1a of \"a\"");

        r = ports_allocate("alice", "127.0.0.1", PORT_MIN, PORT_MAX, NULL, 0, a);
        is_int(r, 0, "allocate for alice");
        ok(ports_valid(a, PORT_MIN, PORT_MAX), "five distinct ports in range");
        is_int(a[0], PORT_MIN + fnv1a_ref("alice") % (PORT_MAX - PORT_MIN + 1), "search starts at the name's hash");
        r = ports_allocate("alice", "127.0.0.1", PORT_MIN, PORT_MAX, NULL, 0, b);
        is_int(r, 0, "allocate for alice again");
        ok(memcmp(a, b, sizeof a) == 0, "same name, same ports");

        /* taken[] is respected: the five taken ones are all skipped. */
        r = ports_allocate("alice", "127.0.0.1", PORT_MIN, PORT_MAX, a, _CHANNEL_MAX, c);
        is_int(r, 0, "allocate with alice's ports taken");
        ok(ports_valid(c, PORT_MIN, PORT_MAX), "still five distinct ports in range");
        ok(!ports_intersect(c, _CHANNEL_MAX, a, _CHANNEL_MAX), "none of the taken ports");

        /* A port in use right now is skipped, and the probe goes on linearly from there. */
        fd = listen_on("127.0.0.1", a[0], NULL);
        ok(fd >= 0, "occupy alice's first port");
        if (fd >= 0) {
                r = ports_allocate("alice", "127.0.0.1", PORT_MIN, PORT_MAX, NULL, 0, c);
                is_int(r, 0, "allocate with the first port in use");
                ok(!ports_intersect(c, _CHANNEL_MAX, a, 1), "the occupied port is skipped");
                ok(memcmp(c, a + 1, sizeof(uint16_t) * (_CHANNEL_MAX - 1)) == 0, "the next ports follow in order");
                close(fd);
        }

        /* A range of exactly five wraps around from the hashed start and returns all of it. */
        r = ports_allocate("bob", "127.0.0.1", PORT_MIN, PORT_MIN + 4, NULL, 0, c);
        is_int(r, 0, "range of exactly five");
        if (r == 0) {
                uint32_t start = fnv1a_ref("bob") % 5;
                bool in_order = true;
                for (int i = 0; i < _CHANNEL_MAX; i++)
                        in_order = in_order && c[i] == PORT_MIN + (start + (uint32_t) i) % 5;
                ok(in_order, "linear probe with wrap from offset %u", (unsigned) start);
        }

        memset(sentinel, 0x5a, sizeof sentinel);
        memcpy(c, sentinel, sizeof c);
        is_int(ports_allocate("bob", "127.0.0.1", PORT_MIN, PORT_MIN + 3, NULL, 0, c), -EADDRNOTAVAIL,
               "range of four: -EADDRNOTAVAIL");
        ok(memcmp(c, sentinel, sizeof c) == 0, "ret untouched on -EADDRNOTAVAIL");
        taken[0] = PORT_MIN + 1;
        taken[1] = PORT_MIN + 5;
        is_int(ports_allocate("bob", "127.0.0.1", PORT_MIN, PORT_MIN + 5, taken, 2, c), -EADDRNOTAVAIL,
               "range of six with two taken: -EADDRNOTAVAIL");
        fd = listen_on("127.0.0.1", PORT_MIN + 2, NULL);
        ok(fd >= 0, "occupy a port of a range of five");
        if (fd >= 0) {
                is_int(ports_allocate("bob", "127.0.0.1", PORT_MIN, PORT_MIN + 4, NULL, 0, c), -EADDRNOTAVAIL,
                       "range of five with one in use: -EADDRNOTAVAIL");
                close(fd);
        }
        ok(memcmp(c, sentinel, sizeof c) == 0, "ret still untouched");

        is_int(ports_allocate("bob", "127.0.0.1", PORT_MAX, PORT_MIN, NULL, 0, c), -EINVAL, "min > max: -EINVAL");
        is_int(ports_allocate("bob", "127.0.0.1", 0, 10, NULL, 0, c), -EINVAL, "min 0: -EINVAL");
        is_int(ports_allocate("bob", "no-ip", PORT_MIN, PORT_MAX, NULL, 0, c), -EINVAL, "bad ip: -EINVAL");
        ok(memcmp(c, sentinel, sizeof c) == 0, "ret untouched on errors");
}

/* ---- Unix sockets (transport ipc) ---- */

static void test_ipc_address(void) {
        ConnectionInfo ci = sample(), before;
        _cleanup_free_ char *shell = NULL, *hb = NULL;
        char rd[128], ep[160];

        shell = ipc_socket_path("/run/kernelsup", "a", CHANNEL_SHELL);
        hb = ipc_socket_path("/run/kernelsup", "a", CHANNEL_HB);
        is_str(shell, "/run/kernelsup/ipc/a/k-1", "ipc_socket_path: shell is k-1");
        is_str(hb, "/run/kernelsup/ipc/a/k-5", "ipc_socket_path: hb is k-5");

        is_int(connection_info_set_address(&ci, "/run/kernelsup", "a"), 0, "set_address tcp");
        ok(streq(ci.ip, "127.0.0.1") && ci.ports[CHANNEL_SHELL] == 27101, "tcp: 127.0.0.1, the ports untouched");

        ci.transport = TRANSPORT_IPC;
        is_int(connection_info_set_address(&ci, "/run/kernelsup", "a"), 0, "set_address ipc");
        is_str(ci.ip, "/run/kernelsup/ipc/a/k", "ipc: ip is the sockets' path prefix");
        ok(ci.ports[CHANNEL_SHELL] == 1 && ci.ports[CHANNEL_IOPUB] == 2 && ci.ports[CHANNEL_STDIN] == 3 &&
                   ci.ports[CHANNEL_CONTROL] == 4 && ci.ports[CHANNEL_HB] == 5,
           "ipc: ports 1..5 in channel order");

        /* "<rd>/ipc/a/k-5" is strlen(rd) + 10 bytes: 97 fits the 107 of sun_path, 98 does not. */
        memset(rd, 'r', sizeof rd);
        rd[0] = '/';
        rd[97] = '\0';
        is_int(connection_info_set_address(&ci, rd, "a"), 0, "socket path of exactly 107 bytes is accepted");
        is_int(strlen(ci.ip) + 2, 107, "its longest socket path is 107 bytes");
        rd[97] = 'r';
        rd[98] = '\0';
        before = ci;
        is_int(connection_info_set_address(&ci, rd, "a"), -ENAMETOOLONG, "108 bytes: -ENAMETOOLONG");
        ok(memcmp(&ci, &before, sizeof ci) == 0, "ci untouched on -ENAMETOOLONG");

        ci = sample();
        is_int(connection_endpoint(&ci, CHANNEL_IOPUB, ep, sizeof ep), 0, "endpoint tcp");
        is_str(ep, "tcp://127.0.0.1:27102", "tcp endpoint");
        snprintf(ci.ip, sizeof ci.ip, "::1");
        is_int(connection_endpoint(&ci, CHANNEL_HB, ep, sizeof ep), 0, "endpoint tcp6");
        is_str(ep, "tcp://[::1]:27105", "tcp6 endpoint in brackets");
        ci.transport = TRANSPORT_IPC;
        (void) connection_info_set_address(&ci, "/run/kernelsup", "a");
        is_int(connection_endpoint(&ci, CHANNEL_IOPUB, ep, sizeof ep), 0, "endpoint ipc");
        is_str(ep, "ipc:///run/kernelsup/ipc/a/k-2", "ipc endpoint is ipc://<ip>-<port>, as jupyter_client makes it");
        is_int(connection_endpoint(&ci, CHANNEL_IOPUB, ep, 10), -EINVAL, "endpoint that does not fit: -EINVAL");
        is_int(connection_endpoint(&ci, _CHANNEL_MAX, ep, sizeof ep), -EINVAL, "endpoint of no channel: -EINVAL");
        ci.ports[CHANNEL_IOPUB] = 0;
        is_int(connection_endpoint(&ci, CHANNEL_IOPUB, ep, sizeof ep), -EINVAL, "endpoint of port 0: -EINVAL");
}

/* jupyter_client itself reads our ipc file and names the endpoints the kernel binds and the daemon connects to. */
static void test_python_ipc_urls(const ConnectionInfo *ci) {
        char path[512], cmd[1024], line[512] = "", want[512] = "";
        FILE *f;
        int status;

        if (!have_jupyter_client()) {
                ok(1, "# SKIP /usr/bin/python3 has no jupyter_client");
                return;
        }
        snprintf(path, sizeof path, "%s/ipc.json", tmpdir);
        is_int(connection_file_write(path, ci, (uid_t) -1, (gid_t) -1), 0, "write an ipc connection file");
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import sys; from jupyter_client import BlockingKernelClient as C; "
                 "c=C(); c.load_connection_file(sys.argv[1]); "
                 "print(\" \".join(c._make_url(ch) for ch in (\"shell\",\"iopub\",\"stdin\",\"control\",\"hb\")))' "
                 "'%s'",
                 path);
        f = popen(cmd, "r");
        if (!f || !fgets(line, sizeof line, f))
                line[0] = '\0';
        status = f ? pclose(f) : -1;
        ok(status == 0, "jupyter_client loaded the ipc file");
        line[strcspn(line, "\n")] = '\0';
        for (Channel ch = 0; ch < _CHANNEL_MAX; ch++) {
                char ep[256];
                size_t n = strlen(want);
                (void) connection_endpoint(ci, ch, ep, sizeof ep);
                snprintf(want + n, sizeof want - n, "%s%s", n ? " " : "", ep);
        }
        is_str(line, want, "jupyter_client's endpoints are connection_endpoint's");
}

static void test_ipc_format_parse(void) {
        ConnectionInfo ci = sample(), back;
        _cleanup_free_ char *s = NULL;
        json_auto_t *j = NULL;
        char text[1024], ip[128];

        ci.transport = TRANSPORT_IPC;
        (void) connection_info_set_address(&ci, "/run/kernelsup", "a");
        s = connection_info_format(&ci);
        j = s ? json_loads(s, 0, NULL) : NULL;
        is_str(json_string_value(json_object_get(j, "transport")), "ipc", "ipc: format says transport ipc");
        is_str(json_string_value(json_object_get(j, "ip")), "/run/kernelsup/ipc/a/k",
               "ipc: format's ip is the prefix");
        is_int(s ? connection_info_parse(s, &back) : -1, 0, "ipc: parse what format wrote");
        ok(ci_equal(&ci, &back) && back.transport == TRANSPORT_IPC, "ipc: format/parse round trip");

        /* The longest prefix parse takes leaves room for "-65535" within 107 bytes. */
        for (size_t n = 101; n <= 102; n++) {
                memset(ip, 'p', sizeof ip);
                ip[0] = '/';
                ip[n] = '\0';
                snprintf(text, sizeof text,
                         "{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,\"hb_port\":5,"
                         "\"ip\":\"%s\",\"key\":\"k\",\"transport\":\"ipc\"}",
                         ip);
                is_int(connection_info_parse(text, &back), n == 101 ? 0 : -EBADMSG, "ipc: a prefix of %zu bytes %s", n,
                       n == 101 ? "parses" : "is refused");
        }
        is_int(connection_info_parse("{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                                     "\"hb_port\":5,\"ip\":\"kernel-ipc\",\"key\":\"k\",\"transport\":\"ipc\"}",
                                     &back),
               -EBADMSG, "ipc: a relative prefix is refused");
        is_int(connection_info_parse("{\"shell_port\":1,\"iopub_port\":2,\"stdin_port\":3,\"control_port\":4,"
                                     "\"hb_port\":5,\"ip\":\"127.0.0.1\",\"key\":\"k\",\"transport\":\"udp\"}",
                                     &back),
               -EBADMSG, "transport udp is refused");
        is_int(transport_from_string("IPC"), -EINVAL, "transport_from_string is exact");
        test_python_ipc_urls(&ci);
        ok(transport_to_string(_TRANSPORT_MAX) == NULL, "transport_to_string out of range is NULL");
}

static int path_stat(const char *dir, const char *name, struct stat *st) {
        char p[512];

        snprintf(p, sizeof p, "%s/%s", dir, name);
        return lstat(p, st) < 0 ? -errno : 0;
}

static int touch_at(const char *dir, const char *name) {
        char p[512];
        int fd;

        snprintf(p, sizeof p, "%s/%s", dir, name);
        fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        close(fd);
        return 0;
}

static int bind_unix_at(const char *dir, const char *name) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

        snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", dir, name);
        r = fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 ? -errno : 0;
        if (fd >= 0)
                close(fd); /* the socket file stays behind, as a SIGKILLed kernel's does */
        return r;
}

static void test_ipc_dir(void) {
        char rd[256], ipc[300], a[320], target[300];
        _cleanup_free_ char *failed = NULL;
        struct stat st;
        bool root = geteuid() == 0;

        snprintf(rd, sizeof rd, "%s/rd", tmpdir);
        snprintf(ipc, sizeof ipc, "%s/ipc", rd);
        snprintf(a, sizeof a, "%s/a", ipc);
        if (mkdir(rd, 0755) < 0) {
                ok(false, "mkdir %s", rd);
                return;
        }
        is_int(ipc_sockets_remove(rd, "a", NULL), 0, "remove before anything exists: success");
        is_int(ipc_dir_prepare(rd, "a", (uid_t) -1, (gid_t) -1, NULL), 0, "prepare creates the directories");
        ok(lstat(ipc, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755 && st.st_uid == geteuid(),
           "ipc/ is ours, 0755");
        ok(lstat(a, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 && st.st_uid == geteuid(),
           "ipc/a is ours, 0700");

        /* Loosened by hand: put right at the next launch. */
        (void) chmod(ipc, 0777);
        (void) chmod(a, 0755);
        is_int(ipc_dir_prepare(rd, "a", (uid_t) -1, (gid_t) -1, NULL), 0, "prepare again");
        ok(lstat(ipc, &st) == 0 && (st.st_mode & 07777) == 0755, "ipc/ back to 0755");
        ok(lstat(a, &st) == 0 && (st.st_mode & 07777) == 0700, "ipc/a back to 0700");
        if (root) {
                is_int(ipc_dir_prepare(rd, "a", 12345, 23456, NULL), 0, "prepare for uid 12345");
                ok(lstat(a, &st) == 0 && st.st_uid == 12345 && st.st_gid == 23456, "ipc/a is owned by 12345:23456");
                is_int(ipc_dir_prepare(rd, "a", (uid_t) -1, (gid_t) -1, NULL), 0, "prepare for our own user");
                ok(lstat(a, &st) == 0 && st.st_uid == 0 && st.st_gid == getegid(), "ipc/a is ours again");
        } else
                for (int i = 0; i < 4; i++)
                        ok(true, "# SKIP chown needs root");

        /* A dead kernel's sockets, a file, a symlink: removed (the link itself, not its target); others stay. */
        snprintf(target, sizeof target, "%s/target", tmpdir);
        ok(bind_unix_at(a, "k-1") == 0 && touch_at(a, "k-3") == 0 && touch_at(tmpdir, "target") == 0 &&
                   touch_at(a, "other") == 0,
           "planted a socket at k-1, a file at k-3 and another file");
        {
                char link[400];
                snprintf(link, sizeof link, "%s/k-4", a);
                ok(symlink(target, link) == 0, "planted a symlink at k-4");
        }
        is_int(ipc_dir_prepare(rd, "a", (uid_t) -1, (gid_t) -1, NULL), 0, "prepare with stale entries");
        ok(path_stat(a, "k-1", &st) == -ENOENT && path_stat(a, "k-3", &st) == -ENOENT &&
                   path_stat(a, "k-4", &st) == -ENOENT,
           "k-1, k-3 and k-4 are gone");
        ok(lstat(target, &st) == 0 && path_stat(a, "other", &st) == 0, "the link's target and other files stay");

        ok(bind_unix_at(a, "k-5") == 0, "a socket at k-5 again");
        is_int(ipc_sockets_remove(rd, "a", NULL), 0, "ipc_sockets_remove");
        ok(path_stat(a, "k-5", &st) == -ENOENT, "k-5 is gone");

        /* A directory at a socket path would make the bind fail: said, and left alone. */
        {
                char sub[400];
                snprintf(sub, sizeof sub, "%s/k-2", a);
                (void) mkdir(sub, 0700);
                is_int(ipc_dir_prepare(rd, "a", (uid_t) -1, (gid_t) -1, &failed), -EISDIR,
                       "a directory at k-2: -EISDIR");
                is_str(failed, sub, "failed names it");
                ok(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode), "the directory is left");
                free(failed);
                failed = NULL;
                is_int(ipc_sockets_remove(rd, "a", &failed), -EISDIR, "ipc_sockets_remove: -EISDIR too");
                free(failed);
                failed = NULL;
                (void) rmdir(sub);
        }

        /* Symlinks where the directories should be are never followed. */
        {
                char elsewhere[300], link[400], rd2[300], ipc2[320];
                snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", tmpdir);
                (void) mkdir(elsewhere, 0755);
                snprintf(link, sizeof link, "%s/b", ipc);
                ok(symlink(elsewhere, link) == 0, "planted ipc/b -> elsewhere");
                ok(ipc_dir_prepare(rd, "b", (uid_t) -1, (gid_t) -1, &failed) < 0, "prepare b fails");
                is_str(failed, link, "failed names ipc/b");
                free(failed);
                failed = NULL;
                ok(lstat(elsewhere, &st) == 0 && (st.st_mode & 07777) == 0755, "the link's target kept its mode");
                (void) touch_at(elsewhere, "k-1");
                ok(ipc_sockets_remove(rd, "b", NULL) < 0 && path_stat(elsewhere, "k-1", &st) == 0,
                   "remove through ipc/b fails and removes nothing there");

                snprintf(rd2, sizeof rd2, "%s/rd2", tmpdir);
                snprintf(ipc2, sizeof ipc2, "%s/ipc", rd2);
                (void) mkdir(rd2, 0755);
                ok(symlink(elsewhere, ipc2) == 0, "planted rd2/ipc -> elsewhere");
                ok(ipc_dir_prepare(rd2, "a", (uid_t) -1, (gid_t) -1, &failed) < 0, "prepare under rd2 fails");
                is_str(failed, ipc2, "failed names rd2/ipc");
                ok(path_stat(elsewhere, "a", &st) == -ENOENT, "nothing was created through the link");
        }
        is_int(ipc_dir_prepare(rd, "../x", (uid_t) -1, (gid_t) -1, NULL), -EINVAL, "an invalid name: -EINVAL");
        is_int(ipc_sockets_remove(rd, "../x", NULL), -EINVAL, "remove with an invalid name: -EINVAL");
}

int main(void) {
        if (!mkdtemp(tmpdir))
                skip_all("mkdtemp failed");

        test_channels();
        test_key();
        test_format();
        test_parse_good();
        test_parse_bad();
        test_file_write();
        test_port_is_free();
        test_ports_allocate();
        test_ipc_address();
        test_ipc_format_parse();
        test_ipc_dir();

        {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
                if (system(cmd) != 0)
                        diag("could not remove the temp directory");
        }
        return tap_done();
}

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connfile.h"
#include "userfile.h"
#include "util.h"

/* ipykernel writes whatever key it was given; ConnectionInfo.key holds at most this many characters. */
#define CONN_KEY_MAX KEY_HEX_LEN
/* The longest textual IPv6 address (INET6_ADDRSTRLEN without the NUL). */
#define CONN_IP_MAX 45

static const char *const channel_table[_CHANNEL_MAX] = {
        [CHANNEL_SHELL] = "shell",     [CHANNEL_IOPUB] = "iopub", [CHANNEL_STDIN] = "stdin",
        [CHANNEL_CONTROL] = "control", [CHANNEL_HB] = "hb",
};

/* The connection file's key for each channel's port, in Channel order. */
static const char *const port_key_table[_CHANNEL_MAX] = {
        [CHANNEL_SHELL] = "shell_port",     [CHANNEL_IOPUB] = "iopub_port", [CHANNEL_STDIN] = "stdin_port",
        [CHANNEL_CONTROL] = "control_port", [CHANNEL_HB] = "hb_port",
};

const char *channel_to_string(Channel c) {
        if ((unsigned) c >= _CHANNEL_MAX)
                return NULL;
        return channel_table[c];
}

int connection_key_new(char ret[KEY_HEX_LEN + 1]) {
        uint8_t b[KEY_BYTES];
        int r;

        r = random_bytes(b, sizeof b);
        if (r < 0)
                return r;
        hex_encode(b, sizeof b, ret);
        explicit_bzero(b, sizeof b);
        return 0;
}

char *connection_info_format(const ConnectionInfo *ci) {
        json_auto_t *j = NULL;
        char *s;
        size_t n;

        j = json_object();
        if (!j)
                return NULL;
        for (Channel c = 0; c < _CHANNEL_MAX; c++)
                if (json_object_set_new(j, port_key_table[c], json_integer(ci->ports[c])) < 0)
                        return NULL;
        if (json_object_set_new(j, "ip", json_string(ci->ip)) < 0 ||
            json_object_set_new(j, "key", json_string(ci->key)) < 0 ||
            json_object_set_new(j, "transport", json_string("tcp")) < 0 ||
            json_object_set_new(j, "signature_scheme", json_string("hmac-sha256")) < 0 ||
            json_object_set_new(j, "kernel_name", json_string("python3")) < 0)
                return NULL;

        s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (!s)
                return NULL;
        /* Text files end in a newline; jansson does not add one. */
        n = strlen(s);
        char *t = realloc(s, n + 2);
        if (!t) {
                explicit_bzero(s, n);
                free(s);
                return NULL;
        }
        t[n] = '\n';
        t[n + 1] = '\0';
        return t;
}

/* A JSON string without embedded NULs of 1..max characters (0..max when allow_empty), copied into out. */
static int json_string_copy(const json_t *v, char *out, size_t max, bool allow_empty) {
        size_t n;

        if (!json_is_string(v))
                return -EBADMSG;
        n = json_string_length(v);
        if (n > max || (n == 0 && !allow_empty) || strlen(json_string_value(v)) != n)
                return -EBADMSG;
        memcpy(out, json_string_value(v), n + 1);
        return 0;
}

/* An optional string field that, when present, must equal want. */
static int json_optional_string_is(const json_t *j, const char *field, const char *want) {
        const json_t *v = json_object_get(j, field);

        if (!v)
                return 0;
        if (!json_is_string(v) || !streq(json_string_value(v), want))
                return -EBADMSG;
        return 0;
}

int connection_info_parse(const char *text, ConnectionInfo *ret) {
        json_auto_t *j = NULL;
        ConnectionInfo ci = {};
        const json_t *v;
        int r;

        j = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        if (!j || !json_is_object(j))
                return -EBADMSG;

        for (Channel c = 0; c < _CHANNEL_MAX; c++) {
                json_int_t p;

                v = json_object_get(j, port_key_table[c]);
                if (!json_is_integer(v))
                        return -EBADMSG;
                p = json_integer_value(v);
                if (p < 1 || p > 65535)
                        return -EBADMSG;
                ci.ports[c] = (uint16_t) p;
        }

        r = json_string_copy(json_object_get(j, "ip"), ci.ip, CONN_IP_MAX, false);
        if (r < 0)
                return r;
        /* An empty key is legal for Jupyter (messages go unsigned), so accept what ipykernel wrote. */
        r = json_string_copy(json_object_get(j, "key"), ci.key, CONN_KEY_MAX, true);
        if (r < 0)
                return r;

        /* Only TCP with HMAC-SHA256 is spoken here: another transport or scheme makes the ports or the
         * key meaningless, so refuse rather than connect wrongly. Absent fields take Jupyter's defaults. */
        r = json_optional_string_is(j, "transport", "tcp");
        if (r < 0)
                return r;
        r = json_optional_string_is(j, "signature_scheme", "hmac-sha256");
        if (r < 0)
                return r;
        v = json_object_get(j, "kernel_name");
        if (v && !json_is_string(v))
                return -EBADMSG;

        *ret = ci;
        explicit_bzero(&ci, sizeof ci);
        return 0;
}

static void erase_freep(char **p) {
        if (*p) {
                explicit_bzero(*p, strlen(*p));
                free(*p);
        }
}

int connection_file_write(const char *path, const ConnectionInfo *ci, uid_t uid, gid_t gid) {
        /* The text holds the key: wipe it before the memory goes back to the allocator. */
        _cleanup_(erase_freep) char *text = NULL;

        text = connection_info_format(ci);
        if (!text)
                return -ENOMEM;
        return write_file_atomic(path, text, strlen(text), 0600, uid, gid);
}

int connection_file_publish(const char *path, const ConnectionInfo *ci, const SpawnUser *u, bool in_daemon_dir,
                            char **ret_reason) {
        _cleanup_(erase_freep) char *text = NULL;
        bool as = u && u->change;
        int r;

        if (in_daemon_dir) {
                r = connection_file_write(path, ci, as ? u->uid : (uid_t) -1, as ? u->gid : (gid_t) -1);
                if (r < 0 && ret_reason)
                        *ret_reason = strdup(strerror(-r));
                return r;
        }
        text = connection_info_format(ci);
        if (!text)
                return -ENOMEM;
        return user_file_write(path, text, strlen(text), 0600, u, ret_reason);
}

int port_is_free(const char *ip, uint16_t port) {
        union {
                struct sockaddr sa;
                struct sockaddr_in in;
                struct sockaddr_in6 in6;
        } addr = {};
        socklen_t len;
        _cleanup_close_ int fd = -1;
        int one = 1;

        if (port == 0)
                return -EINVAL;
        if (inet_pton(AF_INET, ip, &addr.in.sin_addr) == 1) {
                addr.in.sin_family = AF_INET;
                addr.in.sin_port = htons(port);
                len = sizeof addr.in;
        } else if (inet_pton(AF_INET6, ip, &addr.in6.sin6_addr) == 1) {
                addr.in6.sin6_family = AF_INET6;
                addr.in6.sin6_port = htons(port);
                len = sizeof addr.in6;
        } else
                return -EINVAL;

        fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* libzmq binds with SO_REUSEADDR, so a port with only TIME_WAIT connections is usable by it. */
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                return -errno;
        if (bind(fd, &addr.sa, len) < 0)
                return errno == EADDRINUSE ? 0 : -errno;
        return 1;
}

/* One bit per port number: whether a port is taken costs the same however many contexts there are. */
typedef struct PortSet {
        uint64_t bits[65536 / 64];
} PortSet;

static bool port_set_has(const PortSet *s, uint16_t port) {
        return s->bits[port / 64] & (UINT64_C(1) << (port % 64));
}

int ports_allocate(const char *name, const char *ip, uint16_t min, uint16_t max, const uint16_t *taken, size_t n_taken,
                   uint16_t ret[_CHANNEL_MAX]) {
        _cleanup_free_ PortSet *taken_set = NULL;
        uint16_t chosen[_CHANNEL_MAX];
        size_t n_chosen = 0;
        uint32_t range, start;
        int r;

        if (min == 0 || min > max || (n_taken > 0 && !taken))
                return -EINVAL;
        range = (uint32_t) max - min + 1;
        if (range < _CHANNEL_MAX)
                return -EADDRNOTAVAIL;

        taken_set = calloc(1, sizeof(PortSet));
        if (!taken_set)
                return -ENOMEM;
        for (size_t i = 0; i < n_taken; i++)
                taken_set->bits[taken[i] / 64] |= UINT64_C(1) << (taken[i] % 64);

        /* Each port of the range is probed at most once, so the chosen ones are distinct by construction. */
        start = string_hash(name) % range;
        for (uint32_t i = 0; i < range && n_chosen < _CHANNEL_MAX; i++) {
                uint16_t port = (uint16_t) (min + (start + i) % range);

                if (port_set_has(taken_set, port))
                        continue;
                r = port_is_free(ip, port);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                chosen[n_chosen++] = port;
        }
        if (n_chosen < _CHANNEL_MAX)
                return -EADDRNOTAVAIL;

        memcpy(ret, chosen, sizeof chosen);
        return 0;
}

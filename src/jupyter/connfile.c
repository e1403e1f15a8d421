#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

static const char *const transport_table[_TRANSPORT_MAX] = {
        [TRANSPORT_TCP] = "tcp",
        [TRANSPORT_IPC] = "ipc",
};

const char *transport_to_string(Transport t) {
        if ((unsigned) t >= _TRANSPORT_MAX)
                return NULL;
        return transport_table[t];
}

int transport_from_string(const char *s) {
        for (int i = 0; s && i < _TRANSPORT_MAX; i++)
                if (streq(transport_table[i], s))
                        return i;
        return -EINVAL;
}

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

        j = json_object();
        if (!j)
                return NULL;
        for (Channel c = 0; c < _CHANNEL_MAX; c++)
                if (json_object_set_new(j, port_key_table[c], json_integer(ci->ports[c])) < 0)
                        return NULL;
        if (json_object_set_new(j, "ip", json_string(ci->ip)) < 0 ||
            json_object_set_new(j, "key", json_string(ci->key)) < 0 ||
            json_object_set_new(j, "transport", json_string(transport_to_string(ci->transport))) < 0 ||
            json_object_set_new(j, "signature_scheme", json_string("hmac-sha256")) < 0 ||
            json_object_set_new(j, "kernel_name", json_string("python3")) < 0)
                return NULL;

        return json_dump_line(j, JSON_INDENT(2) | JSON_SORT_KEYS);
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

/* "transport": absent is Jupyter's default, tcp. */
static int json_get_transport(const json_t *j, Transport *ret) {
        const json_t *v = json_object_get(j, "transport");
        int t;

        if (!v) {
                *ret = TRANSPORT_TCP;
                return 0;
        }
        t = json_is_string(v) ? transport_from_string(json_string_value(v)) : -EINVAL;
        if (t < 0)
                return -EBADMSG;
        *ret = t;
        return 0;
}

/* The longest socket path an ipc prefix makes: "<prefix>-65535". */
#define IPC_SUFFIX_MAX (sizeof("-65535") - 1)

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

        r = json_get_transport(j, &ci.transport);
        if (r < 0)
                return r;
        /* For ipc, ip is the sockets' path prefix: absolute, so that it does not depend on a client's cwd. */
        if (ci.transport == TRANSPORT_IPC)
                r = json_string_copy(json_object_get(j, "ip"), ci.ip, UNIX_PATH_MAX_LEN - IPC_SUFFIX_MAX, false);
        else
                r = json_string_copy(json_object_get(j, "ip"), ci.ip, CONN_IP_MAX, false);
        if (r < 0)
                return r;
        if (ci.transport == TRANSPORT_IPC && ci.ip[0] != '/')
                return -EBADMSG;
        /* An empty key is legal for Jupyter (messages go unsigned), so accept what ipykernel wrote. */
        r = json_string_copy(json_object_get(j, "key"), ci.key, CONN_KEY_MAX, true);
        if (r < 0)
                return r;

        /* Only HMAC-SHA256 is spoken here: another scheme makes the key meaningless, so refuse rather than
         * sign wrongly. An absent field takes Jupyter's default. */
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

/* ---- Unix sockets ---- */

/* Below runtime_dir: one directory for all contexts, root's, then one per context, its user's. */
#define IPC_DIR "ipc"
/* The name part of a socket path before "-PORT": short, since the whole path must fit sun_path. */
#define IPC_SOCKET_STEM "k"

/* jupyter_client numbers ipc sockets from 1 itself; the port is only the path's suffix. */
static uint16_t ipc_port(Channel ch) {
        return (uint16_t) (ch + 1);
}

char *ipc_socket_path(const char *runtime_dir, const char *name, Channel ch) {
        char *s;

        if (asprintf(&s, "%s/" IPC_DIR "/%s/" IPC_SOCKET_STEM "-%u", runtime_dir, name, (unsigned) ipc_port(ch)) < 0)
                return NULL;
        return s;
}

int connection_info_set_address(ConnectionInfo *ci, const char *runtime_dir, const char *name) {
        char prefix[sizeof ci->ip];
        int k;

        if (ci->transport == TRANSPORT_TCP) {
                snprintf(ci->ip, sizeof ci->ip, "127.0.0.1");
                return 0;
        }
        k = snprintf(prefix, sizeof prefix, "%s/" IPC_DIR "/%s/" IPC_SOCKET_STEM, runtime_dir, name);
        /* The longest socket path is the prefix and "-5". */
        if (k < 0 || (size_t) k + 2 > UNIX_PATH_MAX_LEN)
                return -ENAMETOOLONG;
        memcpy(ci->ip, prefix, (size_t) k + 1);
        for (Channel ch = 0; ch < _CHANNEL_MAX; ch++)
                ci->ports[ch] = ipc_port(ch);
        return 0;
}

int connection_endpoint(const ConnectionInfo *ci, Channel ch, char *buf, size_t size) {
        uint16_t port = (unsigned) ch < _CHANNEL_MAX ? ci->ports[ch] : 0;
        int k;

        if (port == 0)
                return -EINVAL;
        if (ci->transport == TRANSPORT_IPC)
                k = snprintf(buf, size, "ipc://%s-%u", ci->ip, (unsigned) port);
        else
                k = snprintf(buf, size, strchr(ci->ip, ':') ? "tcp://[%s]:%u" : "tcp://%s:%u", ci->ip,
                             (unsigned) port);
        return k < 0 || (size_t) k >= size ? -EINVAL : 0;
}

static void failed_name(char **ret_failed, const char *runtime_dir, const char *name, const char *entry) {
        if (!ret_failed)
                return;
        if (asprintf(ret_failed, "%s/" IPC_DIR "%s%s%s%s", runtime_dir, name ? "/" : "", name ?: "", entry ? "/" : "",
                     entry ?: "") < 0)
                *ret_failed = NULL;
}

/* Creates dirfd/name (mkdirat follows no link at name) unless it exists, and opens it, never through a symlink. */
static int dir_make_open_at(int dirfd, const char *name, mode_t mode) {
        int fd;

        if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Sets owner and mode through the open directory, whatever they were: a directory left by an earlier
 * user of the context, or loosened by hand, is put right before a kernel binds in it. uid (uid_t)-1: ours. */
static int dir_enforce(int fd, uid_t uid, gid_t gid, mode_t mode) {
        struct stat st;

        if (uid == (uid_t) -1) {
                uid = geteuid();
                gid = getegid();
        }
        if (fstat(fd, &st) < 0)
                return -errno;
        if ((st.st_uid != uid || st.st_gid != gid) && fchown(fd, uid, gid) < 0)
                return -errno;
        if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
                return -errno;
        return 0;
}

static int ipc_sockets_remove_at(int fd, const char **ret_entry) {
        static const char *const entries[_CHANNEL_MAX] = {
                IPC_SOCKET_STEM "-1", IPC_SOCKET_STEM "-2", IPC_SOCKET_STEM "-3",
                IPC_SOCKET_STEM "-4", IPC_SOCKET_STEM "-5",
        };

        for (Channel ch = 0; ch < _CHANNEL_MAX; ch++)
                /* unlinkat removes a symlink itself, and refuses a directory (EISDIR). */
                if (unlinkat(fd, entries[ch], 0) < 0 && errno != ENOENT) {
                        *ret_entry = entries[ch];
                        return -errno;
                }
        return 0;
}

static int ipc_dir_open(const char *runtime_dir, bool create, int *ret_parent) {
        _cleanup_close_ int rfd = -1;
        int fd;

        rfd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return -errno;
        if (create)
                fd = dir_make_open_at(rfd, IPC_DIR, 0755);
        else {
                fd = openat(rfd, IPC_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                fd = fd < 0 ? -errno : fd;
        }
        *ret_parent = fd;
        return fd < 0 ? fd : 0;
}

int ipc_dir_prepare(const char *runtime_dir, const char *name, uid_t uid, gid_t gid, char **ret_failed) {
        _cleanup_close_ int pfd = -1, fd = -1;
        const char *entry = NULL;
        int r;

        if (!context_name_valid(name))
                return -EINVAL;
        r = ipc_dir_open(runtime_dir, true, &pfd);
        /* Only we may rename or replace a context's directory. */
        if (r >= 0)
                r = dir_enforce(pfd, (uid_t) -1, (gid_t) -1, 0755);
        if (r < 0) {
                failed_name(ret_failed, runtime_dir, NULL, NULL);
                return r;
        }
        fd = dir_make_open_at(pfd, name, 0700);
        r = fd < 0 ? fd : dir_enforce(fd, uid, gid, 0700);
        if (r < 0) {
                failed_name(ret_failed, runtime_dir, name, NULL);
                return r;
        }
        r = ipc_sockets_remove_at(fd, &entry);
        if (r < 0)
                failed_name(ret_failed, runtime_dir, name, entry);
        return r;
}

int ipc_sockets_remove(const char *runtime_dir, const char *name, char **ret_failed) {
        _cleanup_close_ int pfd = -1, fd = -1;
        const char *entry = NULL;
        int r;

        if (!context_name_valid(name))
                return -EINVAL;
        r = ipc_dir_open(runtime_dir, false, &pfd);
        if (r == -ENOENT)
                return 0;
        if (r >= 0) {
                fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT)
                        return 0;
                r = fd < 0 ? -errno : 0;
        }
        if (r < 0) {
                failed_name(ret_failed, runtime_dir, pfd >= 0 ? name : NULL, NULL);
                return r;
        }
        r = ipc_sockets_remove_at(fd, &entry);
        if (r < 0)
                failed_name(ret_failed, runtime_dir, name, entry);
        return r;
}

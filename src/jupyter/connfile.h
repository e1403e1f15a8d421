/* Jupyter connection information: five stable ports (or Unix socket paths)
 * and a 256-bit key, the connection file's JSON, its atomic 0600 write, port
 * allocation, and the private directory of a context's Unix sockets. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "user.h"

typedef enum Channel {
        CHANNEL_SHELL,
        CHANNEL_IOPUB,
        CHANNEL_STDIN,
        CHANNEL_CONTROL,
        CHANNEL_HB,
        _CHANNEL_MAX,
} Channel;

const char *channel_to_string(Channel c); /* "shell", "iopub", "stdin", "control", "hb"; NULL out of range */

/* How a kernel's five sockets are reached. tcp: ports on ip, which any local
 * user can connect to. ipc: Unix sockets at "<ip>-<port>" (jupyter_client's
 * and ipykernel's layout), reachable by whoever can enter their directory. */
typedef enum Transport {
        TRANSPORT_TCP, /* 0: Jupyter's default when a file names none */
        TRANSPORT_IPC,
        _TRANSPORT_MAX,
} Transport;

const char *transport_to_string(Transport t); /* "tcp", "ipc"; NULL out of range */
int transport_from_string(const char *s);     /* -EINVAL if unknown */

#define KEY_BYTES 32
#define KEY_HEX_LEN (2 * KEY_BYTES)

/* A Unix socket path holds at most this many bytes (sun_path without its NUL). */
#define UNIX_PATH_MAX_LEN 107

typedef struct ConnectionInfo {
        Transport transport;
        /* tcp: a numeric address, "127.0.0.1". ipc: the sockets' path prefix, "<dir>/k" for "<dir>/k-1" ... */
        char ip[UNIX_PATH_MAX_LEN + 1];
        uint16_t ports[_CHANNEL_MAX];
        /* The HMAC key as Jupyter uses it: the bytes of this hex string (the
         * hex text itself is the key, as with jupyter_client's uuid keys). */
        char key[KEY_HEX_LEN + 1];
} ConnectionInfo;

/* A fresh key from getrandom: 32 random bytes written as 64 hex digits. */
int connection_key_new(char ret[KEY_HEX_LEN + 1]);

/* The connection file's JSON text: shell_port, iopub_port, stdin_port,
 * control_port, hb_port, ip, key, transport ("tcp" or "ipc"), signature_scheme
 * "hmac-sha256", kernel_name "python3". Newly allocated, ends in a newline. */
char *connection_info_format(const ConnectionInfo *ci);
/* Parses that JSON (what ipykernel or we wrote; an absent transport is tcp).
 * -EBADMSG when malformed: for ipc, ip must be an absolute path whose socket
 * paths fit a Unix socket address. */
int connection_info_parse(const char *text, ConnectionInfo *ret);

/* Writes the connection file at path atomically with mode 0600, owned by
 * uid:gid (uid (uid_t)-1 leaves the owner as is), never through a symlink:
 * the parent is opened with O_NOFOLLOW and a symlink at path is replaced. */
int connection_file_write(const char *path, const ConnectionInfo *ci, uid_t uid, gid_t gid);

/* Publishes the connection file for the user u (NULL or u->change false: the daemon's own). In the daemon's own
 * directory for published files (in_daemon_dir: <runtime_dir>/connections, root's, where no one else can plant
 * anything) the daemon writes it with connection_file_write() and hands it to u; anywhere else it is written with
 * u's own rights by user_file_write(), so it lands only where u could put it itself, and no component of the path
 * may be a symlink. On failure returns -errno and, when ret_reason is not NULL, a newly allocated sentence saying
 * why, naming the component at fault. */
int connection_file_publish(const char *path, const ConnectionInfo *ci, const SpawnUser *u, bool in_daemon_dir,
                            char **ret_reason);

/* 1 when ip:port can be bound now (tested with SO_REUSEADDR, as libzmq
 * binds), 0 when it is in use, -errno on other errors (-EINVAL for an ip
 * that is not a numeric IPv4/IPv6 address, or port 0). */
int port_is_free(const char *ip, uint16_t port);

/* Chooses _CHANNEL_MAX distinct ports in [min, max] that are not in taken[]
 * and are free now. The search starts at an offset derived from name (a hash),
 * so a context tends to get the same ports even if its state is lost.
 * -EADDRNOTAVAIL when the range has too few; -EINVAL when min is 0 or
 * min > max; port_is_free's errors other than "in use" are returned as is.
 * ret is written only on success. */
int ports_allocate(const char *name, const char *ip, uint16_t min, uint16_t max, const uint16_t *taken, size_t n_taken,
                   uint16_t ret[_CHANNEL_MAX]);

/* ---- Unix sockets (transport ipc) ----
 * A context's sockets are <runtime_dir>/ipc/<name>/k-1 (shell) ... k-5 (hb):
 * the ports of an ipc kernel are 1..5, jupyter_client's own numbering for ipc.
 * The directory is the context user's, mode 0700, so only that user and root
 * can connect. Paths depend only on runtime_dir and the name: a cached
 * connection file keeps working across kernel restarts, daemon restarts and
 * reboots. Kept short, as a socket path has at most UNIX_PATH_MAX_LEN bytes. */

/* The path of the context's socket for channel ch, newly allocated (NULL on
 * out of memory). Not cut: compare its length with UNIX_PATH_MAX_LEN. */
char *ipc_socket_path(const char *runtime_dir, const char *name, Channel ch);

/* Fills ci's address for its transport: "127.0.0.1" for tcp; for ipc the path
 * prefix of the context's sockets, and the ports 1..5. -ENAMETOOLONG when a
 * socket path would not fit a Unix socket address. ci is unchanged on error. */
int connection_info_set_address(ConnectionInfo *ci, const char *runtime_dir, const char *name);

/* The endpoint libzmq connects or binds to for channel ch: "tcp://IP:PORT",
 * "tcp://[IPV6]:PORT" or "ipc://PREFIX-PORT". -EINVAL when it does not fit
 * size, or the port is 0. */
int connection_endpoint(const ConnectionInfo *ci, Channel ch, char *buf, size_t size);

/* Makes <runtime_dir>/ipc (ours, 0755) and <runtime_dir>/ipc/<name> (owned by
 * uid:gid, mode 0700; uid (uid_t)-1: our own euid and egid) exist, both made
 * with mkdirat and opened with O_NOFOLLOW, and enforces those owners and
 * modes through the open directories on every call (fchown, fchmod); then
 * removes the sockets an earlier kernel left
 * there (ipc_sockets_remove). Neither may be a symlink (-ELOOP, -ENOTDIR).
 * On failure *ret_failed (may be NULL) names what failed: the directory, or
 * the socket path that could not be removed (newly allocated). */
int ipc_dir_prepare(const char *runtime_dir, const char *name, uid_t uid, gid_t gid, char **ret_failed);

/* Removes k-1 ... k-5 from <runtime_dir>/ipc/<name>, never following a
 * symlink (an entry that is one is removed itself). A missing directory or
 * socket is success. -EISDIR when one of them is a directory, left as it is
 * (a bind there would fail). *ret_failed as for ipc_dir_prepare. */
int ipc_sockets_remove(const char *runtime_dir, const char *name, char **ret_failed);

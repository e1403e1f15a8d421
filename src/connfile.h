/* Jupyter connection information: five stable ports and a 256-bit key, the
 * connection file's JSON, its atomic 0600 write, and port allocation. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "spawn.h"

typedef enum Channel {
        CHANNEL_SHELL,
        CHANNEL_IOPUB,
        CHANNEL_STDIN,
        CHANNEL_CONTROL,
        CHANNEL_HB,
        _CHANNEL_MAX,
} Channel;

const char *channel_to_string(Channel c); /* "shell", "iopub", "stdin", "control", "hb"; NULL out of range */

#define KEY_BYTES 32
#define KEY_HEX_LEN (2 * KEY_BYTES)

typedef struct ConnectionInfo {
        char ip[46];                    /* "127.0.0.1" */
        uint16_t ports[_CHANNEL_MAX];
        /* The HMAC key as Jupyter uses it: the bytes of this hex string (the
         * hex text itself is the key, as with jupyter_client's uuid keys). */
        char key[KEY_HEX_LEN + 1];
} ConnectionInfo;

/* A fresh key from getrandom: 32 random bytes written as 64 hex digits. */
int connection_key_new(char ret[KEY_HEX_LEN + 1]);

/* The connection file's JSON text: shell_port, iopub_port, stdin_port,
 * control_port, hb_port, ip, key, transport "tcp", signature_scheme
 * "hmac-sha256", kernel_name "python3". Newly allocated, ends in a newline. */
char *connection_info_format(const ConnectionInfo *ci);
/* Parses that JSON (what ipykernel or we wrote). -EBADMSG when malformed. */
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
int ports_allocate(const char *name, const char *ip, uint16_t min, uint16_t max, const uint16_t *taken,
                   size_t n_taken, uint16_t ret[_CHANNEL_MAX]);

/* The sockets kernelsup-http listens on: made from --listen addresses, or passed by systemd (LISTEN_FDS). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef enum ListenKind { LISTEN_TCP, LISTEN_UNIX } ListenKind;

typedef struct Listener {
        int fd;
        ListenKind kind;
        bool loopback;  /* TCP on 127.0.0.0/8 or ::1 */
        uint16_t port;  /* TCP */
        char name[128]; /* as given or found: "127.0.0.1:8080", "[::1]:8080", "unix:/run/x.sock" */
        char host[64];  /* TCP: the address a Host header may name ("127.0.0.1", "::1") */
} Listener;

/* Parses "127.0.0.1:PORT", "[::1]:PORT" (any IPv4 or bracketed IPv6 literal) or "unix:PATH" into *ret, without
 * opening anything; -EINVAL with *ret_why (a static sentence) otherwise. */
int listen_parse(const char *addr, Listener *ret, const char **ret_why);

/* Opens l (from listen_parse) and listens, SOCK_CLOEXEC and non-blocking; a Unix socket gets mode 0600 and replaces
 * a stale socket at its path (never another kind of file). l->port is then the bound port (0 asked: the kernel's
 * choice). -errno. */
int listen_open(Listener *l);

/* Describes an inherited socket fd (systemd's): its kind, port and name; -ENOTSOCK or -EINVAL for a socket that is
 * not a listening stream socket of AF_INET, AF_INET6 or AF_UNIX. */
int listen_adopt(int fd, Listener *ret);

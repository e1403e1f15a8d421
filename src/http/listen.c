/* The listening sockets of listen.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "listen.h"
#include "macro.h"
#include "util.h"

typedef union SockAddr {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
        struct sockaddr_un un;
} SockAddr;

static int parse_port(const char *s, uint16_t *ret) {
        unsigned long long v;

        if (parse_uint(s, 0, 65535, &v) < 0)
                return -EINVAL;
        *ret = (uint16_t) v;
        return 0;
}

static bool in_loopback(const SockAddr *a) {
        if (a->sa.sa_family == AF_INET)
                return (ntohl(a->in.sin_addr.s_addr) >> 24) == 127;
        return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a->in6.sin6_addr);
}

static void describe_tcp(const SockAddr *a, Listener *l) {
        const void *addr =
                a->sa.sa_family == AF_INET ? (const void *) &a->in.sin_addr : (const void *) &a->in6.sin6_addr;

        inet_ntop(a->sa.sa_family, addr, l->host, sizeof l->host);
        l->port = ntohs(a->sa.sa_family == AF_INET ? a->in.sin_port : a->in6.sin6_port);
        l->loopback = in_loopback(a);
        snprintf(l->name, sizeof l->name, a->sa.sa_family == AF_INET ? "%s:%u" : "[%s]:%u", l->host, l->port);
}

/* The address of l->name's TCP form into *ret. */
static int tcp_address(const Listener *l, SockAddr *ret, socklen_t *ret_len) {
        *ret = (SockAddr){};
        if (inet_pton(AF_INET, l->host, &ret->in.sin_addr) == 1) {
                ret->in.sin_family = AF_INET;
                ret->in.sin_port = htons(l->port);
                *ret_len = sizeof ret->in;
                return 0;
        }
        if (inet_pton(AF_INET6, l->host, &ret->in6.sin6_addr) == 1) {
                ret->in6.sin6_family = AF_INET6;
                ret->in6.sin6_port = htons(l->port);
                *ret_len = sizeof ret->in6;
                return 0;
        }
        return -EINVAL;
}

int listen_parse(const char *addr, Listener *ret, const char **ret_why) {
        Listener l = { .fd = -1 };
        const char *colon;
        bool bracketed = addr[0] == '[';
        SockAddr sa;
        socklen_t len;
        size_t n;

        if (strncmp(addr, "unix:", 5) == 0) {
                if (addr[5] != '/' || strlen(addr + 5) >= sizeof sa.un.sun_path || strlen(addr) >= sizeof l.name) {
                        *ret_why = "a Unix socket's path must be absolute and at most 107 bytes";
                        return -EINVAL;
                }
                l.kind = LISTEN_UNIX;
                strcpy(l.name, addr);
                *ret = l;
                return 0;
        }
        l.kind = LISTEN_TCP;
        if (bracketed) {
                colon = strstr(addr, "]:");
                addr++;
        } else
                colon = strrchr(addr, ':');
        n = colon ? (size_t) (colon - addr) : 0;
        if (!colon || n == 0 || n >= sizeof l.host || (!bracketed && memchr(addr, ':', n)) ||
            parse_port(colon + (bracketed ? 2 : 1), &l.port) < 0) {
                *ret_why = "expected 127.0.0.1:PORT, [::1]:PORT or unix:PATH";
                return -EINVAL;
        }
        memcpy(l.host, addr, n);
        l.host[n] = '\0';
        if (tcp_address(&l, &sa, &len) < 0) {
                *ret_why = "the host must be a numeric IPv4 address or a bracketed IPv6 one";
                return -EINVAL;
        }
        describe_tcp(&sa, &l);
        *ret = l;
        return 0;
}

static int open_unix(Listener *l, SockAddr *sa, socklen_t *len) {
        const char *path = l->name + 5;
        struct stat st;

        sa->un = (struct sockaddr_un){ .sun_family = AF_UNIX };
        strcpy(sa->un.sun_path, path);
        *len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);
        /* A socket left by an earlier run is replaced; anything else at the path is not ours to remove. */
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                if (unlink(path) < 0)
                        return -errno;
        }
        return 0;
}

int listen_open(Listener *l) {
        _cleanup_close_ int fd = -1;
        SockAddr sa;
        socklen_t len;
        int one = 1, r;

        if (l->kind == LISTEN_UNIX)
                r = open_unix(l, &sa, &len);
        else
                r = tcp_address(l, &sa, &len);
        if (r < 0)
                return r;
        fd = socket(sa.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (l->kind == LISTEN_TCP) {
                (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                if (sa.sa.sa_family == AF_INET6)
                        (void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        }
        if (bind(fd, &sa.sa, len) < 0)
                return -errno;
        if (l->kind == LISTEN_UNIX && chmod(l->name + 5, 0600) < 0)
                return -errno;
        if (listen(fd, 128) < 0)
                return -errno;
        if (l->kind == LISTEN_TCP) {
                len = sizeof sa;
                if (getsockname(fd, &sa.sa, &len) < 0)
                        return -errno;
                describe_tcp(&sa, l);
        }
        l->fd = TAKE_FD(fd);
        return 0;
}

int listen_adopt(int fd, Listener *ret) {
        Listener l = { .fd = fd };
        SockAddr sa;
        socklen_t len = sizeof sa;
        int type = 0, acc = 0;
        socklen_t tl = sizeof type, al = sizeof acc;

        if (getsockname(fd, &sa.sa, &len) < 0)
                return -errno;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0)
                return -errno;
        if (type != SOCK_STREAM || !acc)
                return -EINVAL;
        if (sa.sa.sa_family == AF_UNIX) {
                l.kind = LISTEN_UNIX;
                snprintf(l.name, sizeof l.name, "unix:%.*s", (int) sizeof sa.un.sun_path - 1,
                         len > offsetof(struct sockaddr_un, sun_path) ? sa.un.sun_path : "");
        } else if (sa.sa.sa_family == AF_INET || sa.sa.sa_family == AF_INET6) {
                l.kind = LISTEN_TCP;
                describe_tcp(&sa, &l);
        } else
                return -EINVAL;
        (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        *ret = l;
        return 0;
}

/* The control socket's file: its address, a stale one removed, bound with its mode and owner before listen(), or a
 * socket passed by systemd. See control-private.h. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control-private.h"
#include "macro.h"

static int sockaddr_fill(const char *path, struct sockaddr_un *ret, socklen_t *ret_len) {
        size_t n = strlen(path);

        if (n == 0)
                return -EINVAL;
        if (n >= sizeof ret->sun_path)
                return -ENAMETOOLONG;
        *ret = (struct sockaddr_un){ .sun_family = AF_UNIX };
        memcpy(ret->sun_path, path, n + 1);
        *ret_len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
}

/* Makes path free for bind(): nothing there, or a stale socket (refusing
 * connections) that is removed. A socket somebody listens on is -EADDRINUSE,
 * anything else -EEXIST. */
static int socket_path_prepare(const char *path, const struct sockaddr_un *sa, socklen_t sa_len) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -EEXIST;

        /* Non-blocking: a live daemon with a full backlog answers EAGAIN instead of blocking us. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *) sa, sa_len) == 0 || errno == EAGAIN || errno == EINPROGRESS)
                return -EADDRINUSE;
        if (errno != ECONNREFUSED)
                return -errno;
        if (unlink(path) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

int control_socket_bind(const char *path, const ControlSocketAccess *access, int *ret_fd, struct stat *ret_st) {
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa;
        socklen_t sa_len;
        struct stat st;
        int r;

        r = sockaddr_fill(path, &sa, &sa_len);
        if (r < 0)
                return r;
        r = socket_path_prepare(path, &sa, sa_len);
        if (r < 0)
                return r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, (const struct sockaddr *) &sa, sa_len) < 0)
                return -errno;
        /* chown first: it may clear bits that chmod set. */
        if (((access->uid != (uid_t) -1 || access->gid != (gid_t) -1) && chown(path, access->uid, access->gid) < 0) ||
            chmod(path, access->mode & 0777) < 0 || lstat(path, &st) < 0 || listen(fd, CONTROL_BACKLOG) < 0) {
                r = -errno;
                (void) unlink(path);
                return r;
        }
        *ret_fd = TAKE_FD(fd);
        *ret_st = st;
        return 0;
}

int control_socket_dup_passed(int listen_fd, int *ret_fd) {
        int type = 0, domain = 0, fd;
        socklen_t len = sizeof type;

        if (getsockopt(listen_fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
                return -errno;
        len = sizeof domain;
        if (getsockopt(listen_fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
                return -errno;
        if (type != SOCK_STREAM || domain != AF_UNIX)
                return -EPROTOTYPE;
        fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        return 0;
}

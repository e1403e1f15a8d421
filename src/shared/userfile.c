#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "userfile.h"
#include "util.h"

/* A FUSE mount can make any file operation wait forever; the daemon's loop must not. */
#define WRITER_TIMEOUT_MSEC 10000

/* What the child was doing when it failed. */
typedef enum WriteStep {
        STEP_IDENTITY,  /* setgroups/setgid/setuid */
        STEP_DIRECTORY, /* resolving a component of the directory; the report says which */
        STEP_STICKY,    /* root would replace another user's file in a sticky directory */
        STEP_CREATE,
        STEP_WRITE,
        STEP_RENAME,
        STEP_REMOVE, /* a removal: the entry is not a regular file, or unlinkat failed */
        STEP_ENTER,  /* user_dir_enter: chdir */
} WriteStep;

/* The child's answer: err 0 means the file is in place. */
typedef struct WriteReport {
        int err;
        int step;
        size_t prefix; /* STEP_DIRECTORY: the failing component is path[0..prefix) */
        uid_t owner;   /* STEP_STICKY: who owns the file */
} WriteReport;

/* Everything the child needs, prepared in the parent: the child must not allocate. */
typedef struct WriteJob {
        const char *path;
        size_t dir_len; /* path[0..dir_len) is the directory ("/" for a file in the root) */
        const char *name;
        char tmp[NAME_MAX + 1];
        const void *data; /* NULL: remove the file instead */
        size_t len;
        mode_t mode;
        const SpawnUser *user;
        bool enter; /* user_dir_enter: only chdir into path */
} WriteJob;

/* The walk for kernels without openat2, and for naming the component that made openat2 fail: from /, each
 * component opened with O_NOFOLLOW. O_PATH needs only search permission, as a path lookup does. */
static int walk_nofollow(const WriteJob *j, size_t *ret_prefix) {
        char comp[NAME_MAX + 1];
        size_t i = 0;
        int fd, next;

        fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                *ret_prefix = 1;
                return -errno;
        }
        while (i < j->dir_len) {
                size_t start, n;

                while (i < j->dir_len && j->path[i] == '/')
                        i++;
                start = i;
                while (i < j->dir_len && j->path[i] != '/')
                        i++;
                n = i - start;
                if (n == 0)
                        break;
                *ret_prefix = i;
                if (n > NAME_MAX) {
                        close(fd);
                        return -ENAMETOOLONG;
                }
                memcpy(comp, j->path + start, n);
                comp[n] = '\0';
                next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0) {
                        struct stat st;
                        int e = errno;
                        /* O_PATH|O_NOFOLLOW opens a link itself, which O_DIRECTORY then refuses as ENOTDIR. */
                        if (e == ENOTDIR && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                                e = ELOOP;
                        close(fd);
                        return -e;
                }
                close(fd);
                fd = next;
        }
        return fd;
}

static int open_directory(const WriteJob *j, size_t *ret_prefix) {
        char dir[PATH_MAX];
        struct open_how how = {
                .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                .resolve = RESOLVE_NO_SYMLINKS,
        };
        long fd;

        if (j->dir_len >= sizeof dir) {
                *ret_prefix = j->dir_len;
                return -ENAMETOOLONG;
        }
        memcpy(dir, j->path, j->dir_len);
        dir[j->dir_len] = '\0';
        fd = syscall(SYS_openat2, AT_FDCWD, dir, &how, sizeof how);
        if (fd >= 0)
                return (int) fd;
        /* No openat2 (before Linux 5.6, or a seccomp filter), or an error to be pinned on one component. */
        return walk_nofollow(j, ret_prefix);
}

/* The kernel lets root replace anything; hold root to the rule it applies to everyone else in a sticky
 * directory (/tmp): only the owner's file is replaced. */
static int check_sticky(int dirfd, const char *name, uid_t *ret_owner) {
        struct stat dst, fst;

        if (geteuid() != 0)
                return 0;
        if (fstat(dirfd, &dst) < 0)
                return -errno;
        if (!(dst.st_mode & S_ISVTX))
                return 0;
        if (fstatat(dirfd, name, &fst, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (fst.st_uid == 0)
                return 0;
        *ret_owner = fst.st_uid;
        return -EPERM;
}

static int take_identity(const SpawnUser *u) {
        if (!u || !u->change)
                return 0;
        if (setgroups((size_t) u->n_groups, u->groups) < 0 || setresgid(u->gid, u->gid, u->gid) < 0 ||
            setresuid(u->uid, u->uid, u->uid) < 0)
                return -errno;
        /* The child holds a copy of the daemon's memory (every kernel's key): its new owner must not read it. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                return -errno;
        return 0;
}

/* An O_PATH descriptor cannot be fsync'd: the directory is opened again. One its writer may not read keeps the
 * change unsynced. */
static void sync_dir(int dirfd) {
        int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (dfd >= 0) {
                (void) fsync(dfd);
                close(dfd);
        }
}

/* The file's bytes into a new temporary file in dirfd, then over name. Fills *rep on failure. */
static void write_in(const WriteJob *j, int dirfd, WriteReport *rep) {
        int fd, r;

        rep->step = STEP_CREATE;
        fd = openat(dirfd, j->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                rep->err = errno;
                return;
        }
        rep->step = STEP_WRITE;
        r = write_all(fd, j->data, j->len);
        if (r >= 0 && j->user && j->user->change && fchown(fd, (uid_t) -1, j->user->gid) < 0)
                r = -errno;
        if (r >= 0 && (fchmod(fd, j->mode) < 0 || fsync(fd) < 0))
                r = -errno;
        close(fd);
        if (r >= 0) {
                rep->step = STEP_RENAME;
                if (renameat(dirfd, j->tmp, dirfd, j->name) < 0)
                        r = -errno;
        }
        if (r < 0) {
                (void) unlinkat(dirfd, j->tmp, 0);
                rep->err = -r;
                return;
        }
        sync_dir(dirfd);
        rep->err = 0;
}

/* Removes name from dirfd when it is a regular file; a missing one is success. Anything else there (a link, a
 * directory) is not what the daemon wrote, and is left as it is. Fills *rep. */
static void remove_in(const WriteJob *j, int dirfd, WriteReport *rep) {
        struct stat st;

        rep->step = STEP_REMOVE;
        if (fstatat(dirfd, j->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                rep->err = errno == ENOENT ? 0 : errno;
                return;
        }
        if (!S_ISREG(st.st_mode)) {
                rep->err = EMEDIUMTYPE;
                return;
        }
        if (unlinkat(dirfd, j->name, 0) < 0) {
                rep->err = errno == ENOENT ? 0 : errno;
                return;
        }
        sync_dir(dirfd);
        rep->err = 0;
}

/* The child: only async-signal-safe calls, then _exit. Every signal stays blocked (the parent's handlers would
 * write into the parent's loop). */
_Noreturn static void writer_child(const WriteJob *j, int reportfd) {
        WriteReport rep = { .step = STEP_IDENTITY };
        int dirfd, r;

        r = take_identity(j->user);
        if (r < 0) {
                rep.err = -r;
                goto out;
        }
        if (j->enter) {
                rep.step = STEP_ENTER;
                rep.err = chdir(j->path) < 0 ? errno : 0;
                goto out;
        }
        rep.step = STEP_DIRECTORY;
        dirfd = open_directory(j, &rep.prefix);
        if (dirfd < 0) {
                rep.err = -dirfd;
                goto out;
        }
        rep.step = STEP_STICKY;
        r = check_sticky(dirfd, j->name, &rep.owner);
        if (r < 0)
                rep.err = -r;
        else if (j->data)
                write_in(j, dirfd, &rep);
        else
                remove_in(j, dirfd, &rep);
out:
        (void) !write(reportfd, &rep, sizeof rep);
        _exit(rep.err == 0 ? 0 : 1);
}

/* Waits for the child's report within the deadline; kills and reaps it in any case. */
static int writer_wait(pid_t pid, int fd, WriteReport *rep) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + WRITER_TIMEOUT_MSEC * USEC_PER_MSEC;
        ssize_t k = -1;
        int r = 0;

        for (;;) {
                usec_t now = now_usec(CLOCK_MONOTONIC);
                int n;

                if (now >= deadline) {
                        r = -ETIMEDOUT;
                        break;
                }
                n = poll(&pfd, 1, (int) ((deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        continue;
                do
                        k = read(fd, rep, sizeof *rep);
                while (k < 0 && errno == EINTR);
                r = k == (ssize_t) sizeof *rep ? 0 : -EIO;
                break;
        }
        if (r < 0)
                (void) kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        return r;
}

static int writer_run(const WriteJob *j, WriteReport *rep) {
        sigset_t all, old;
        int p[2], r;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        sigfillset(&all);
        (void) pthread_sigmask(SIG_SETMASK, &all, &old);
        pid = fork();
        if (pid == 0) {
                close(p[0]);
                writer_child(j, p[1]);
        }
        r = pid < 0 ? -errno : 0;
        (void) pthread_sigmask(SIG_SETMASK, &old, NULL);
        close(p[1]);
        if (r >= 0)
                r = writer_wait(pid, p[0], rep);
        close(p[0]);
        return r;
}

static const char *writer_name(const SpawnUser *u, char *buf, size_t size) {
        if (!u || !u->change || u->uid == geteuid())
                snprintf(buf, size, "uid %u", (unsigned) geteuid());
        else if (u->name)
                snprintf(buf, size, "user %s", u->name);
        else
                snprintf(buf, size, "uid %u", (unsigned) u->uid);
        return buf;
}

/* The sentence for a failed child, naming the component or the directory. */
static char *report_reason(const WriteJob *j, const WriteReport *rep) {
        char who[64], *s = NULL;
        int dl = (int) j->dir_len, pl = (int) rep->prefix;
        int r = 0;

        writer_name(j->user, who, sizeof who);
        switch (rep->step) {
        case STEP_IDENTITY:
                r = asprintf(&s, "cannot take the identity of %s: %s", who, strerror(rep->err));
                break;
        case STEP_DIRECTORY:
                if (rep->err == ELOOP)
                        r = asprintf(&s, "%.*s is a symbolic link; no component of the path may be one", pl, j->path);
                else if (rep->err == EACCES) {
                        /* A lookup is refused by the directory above the component: its search permission. */
                        int up = pl;
                        while (up > 1 && j->path[up - 1] != '/')
                                up--;
                        r = asprintf(&s, "cannot reach %.*s: %s may not search %.*s", pl, j->path, who,
                                     up > 1 ? up - 1 : 1, j->path);
                } else
                        r = asprintf(&s, "%.*s: %s", pl, j->path, strerror(rep->err));
                break;
        case STEP_STICKY:
                if (rep->err == EPERM)
                        r = asprintf(
                                &s, "%s belongs to uid %u in a sticky directory, and root %s only its own files there",
                                j->path, (unsigned) rep->owner, j->data ? "replaces" : "removes");
                else
                        r = asprintf(&s, "%s: %s", j->path, strerror(rep->err));
                break;
        case STEP_CREATE:
                r = asprintf(&s, "cannot create a file in %.*s as %s: %s", dl, j->path, who, strerror(rep->err));
                break;
        case STEP_RENAME:
                r = asprintf(&s, "cannot replace %s as %s: %s", j->path, who, strerror(rep->err));
                break;
        case STEP_REMOVE:
                if (rep->err == EMEDIUMTYPE)
                        r = asprintf(&s, "%s is not a regular file (not one the daemon wrote); left as it is",
                                     j->path);
                else
                        r = asprintf(&s, "cannot remove %s as %s: %s", j->path, who, strerror(rep->err));
                break;
        case STEP_ENTER:
                r = asprintf(&s, "%s cannot enter %s: %s", who, j->path, strerror(rep->err));
                break;
        default:
                r = asprintf(&s, "cannot write %s as %s: %s", j->path, who, strerror(rep->err));
                break;
        }
        return r < 0 ? NULL : s;
}

/* Splits j->path into its directory and name, refusing what names no file. */
static int job_split(WriteJob *j) {
        const char *slash;

        if (!j->path || j->path[0] != '/')
                return -EINVAL;
        slash = strrchr(j->path, '/');
        j->name = slash + 1;
        j->dir_len = slash == j->path ? 1 : (size_t) (slash - j->path);
        if (!*j->name || streq(j->name, ".") || streq(j->name, ".."))
                return -EISDIR;
        if (strlen(j->name) > NAME_MAX - 20)
                return -ENAMETOOLONG;
        return 0;
}

/* Runs j in a child and turns its report into -errno and a reason. */
static int job_run(const WriteJob *j, char **ret_reason) {
        WriteReport rep = {};
        int r;

        r = writer_run(j, &rep);
        if (r < 0) {
                if (ret_reason && asprintf(ret_reason, "the writer of %s as %s failed: %s", j->path,
                                           writer_name(j->user, (char[64]){}, 64), strerror(-r)) < 0)
                        *ret_reason = NULL;
                return r;
        }
        if (rep.err == 0)
                return 0;
        if (ret_reason)
                *ret_reason = report_reason(j, &rep);
        return -rep.err;
}

int user_file_write(const char *path, const void *data, size_t len, mode_t mode, const SpawnUser *u,
                    char **ret_reason) {
        WriteJob j = { .path = path, .data = data ?: "", .len = len, .mode = mode, .user = u };
        uint8_t rnd[6];
        char rhex[13];
        int r;

        r = job_split(&j);
        if (r < 0)
                return r;
        r = random_bytes(rnd, sizeof rnd);
        if (r < 0)
                return r;
        hex_encode(rnd, sizeof rnd, rhex);
        snprintf(j.tmp, sizeof j.tmp, ".#%s.%s", j.name, rhex);
        return job_run(&j, ret_reason);
}

int user_file_remove(const char *path, const SpawnUser *u, char **ret_reason) {
        WriteJob j = { .path = path, .user = u };
        int r;

        r = job_split(&j);
        if (r < 0)
                return r;
        return job_run(&j, ret_reason);
}

int user_dir_enter(const char *path, const SpawnUser *u, char **ret_reason) {
        WriteJob j = { .path = path, .user = u, .enter = true };

        if (!path || path[0] != '/')
                return -EINVAL;
        return job_run(&j, ret_reason);
}

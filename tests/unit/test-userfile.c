/* user_file_write and user_file_remove: a client-facing file is written (and removed) with the user's own rights and
 * never through a symlink in any component. Run as root (the daemon's case) it drops to uid 4321, which needs no
 * passwd entry; run twice: with openat2, and in a child whose seccomp filter makes openat2 fail with ENOSYS (the walk
 * a kernel before 5.6 gets). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "userfile.h"
#include "util.h"

#define OTHER_ID 4321

static char tmpdir[] = "/tmp/test-userfile.XXXXXX";
static const char *label = "";

static char *path_in(const char *rel) {
        char *p;

        if (asprintf(&p, "%s/%s", tmpdir, rel) < 0)
                abort();
        return p;
}

static void put(const char *rel, const char *text, mode_t mode, uid_t uid) {
        _cleanup_free_ char *p = path_in(rel);
        FILE *f = fopen(p, "we");

        if (!f || fputs(text, f) < 0 || fclose(f) != 0 || chmod(p, mode) < 0 ||
            (uid != (uid_t) -1 && chown(p, uid, uid) < 0)) {
                printf("Bail out! cannot write %s: %m\n", p);
                exit(1);
        }
}

static void dir(const char *rel, mode_t mode, uid_t uid) {
        _cleanup_free_ char *p = path_in(rel);

        if (mkdir(p, mode) < 0 || chmod(p, mode) < 0 || (uid != (uid_t) -1 && chown(p, uid, uid) < 0)) {
                printf("Bail out! mkdir %s: %m\n", p);
                exit(1);
        }
}

static void link_to(const char *target_rel, const char *rel) {
        _cleanup_free_ char *t = path_in(target_rel), *p = path_in(rel);

        if (symlink(t, p) < 0) {
                printf("Bail out! symlink %s: %m\n", p);
                exit(1);
        }
}

/* The file's content, or "" when it cannot be read. */
static char *content(const char *rel) {
        _cleanup_free_ char *p = path_in(rel);
        char *s = NULL;

        if (read_file(p, 4096, &s, NULL) < 0)
                return strdup("");
        return s;
}

static SpawnUser other_user(void) {
        static gid_t groups[] = { OTHER_ID };

        return (SpawnUser){ .change = true, .uid = OTHER_ID, .gid = OTHER_ID, .groups = groups, .n_groups = 1 };
}

/* Writes "new\n" to tmpdir/rel as u; checks the return value and that the reason holds want_reason. */
static void write_expect(const char *rel, const SpawnUser *u, int want_r, const char *want_reason, const char *name) {
        _cleanup_free_ char *p = path_in(rel), *reason = NULL, *want = NULL;
        int r;

        r = user_file_write(p, "new\n", 4, 0600, u, &reason);
        is_int(r, want_r, "%s%s: returns %d", label, name, want_r);
        if (!want_reason)
                return;
        /* A reason starting with '/' names a path below tmpdir. */
        if (asprintf(&want, "%s%s", want_reason[0] == '/' ? tmpdir : "", want_reason) < 0)
                abort();
        ok(reason && strstr(reason, want), "%s%s: the reason says \"%s\" (got: %s)", label, name, want_reason,
           reason ?: "none");
}

static bool no_temp_files(const char *rel) {
        _cleanup_free_ char *cmd = NULL;

        if (asprintf(&cmd, "test -z \"$(find %s/%s -name '.#*' 2>/dev/null)\"", tmpdir, rel) < 0)
                abort();
        return system(cmd) == 0;
}

static void test_links(void) {
        struct stat st;

        /* The case: a root-owned file under a directory the user reaches through a link of theirs. */
        dir("srv", 0755, -1);
        dir("srv/sub", 0755, -1);
        put("srv/sub/k2.json", "precious\n", 0644, -1);
        dir("home", 0755, -1);
        link_to("srv", "home/p");
        write_expect("home/p/sub/k2.json", NULL, -ELOOP, "/home/p is a symbolic link", "a link in a middle component");
        _cleanup_free_ char *c1 = content("srv/sub/k2.json");
        is_str(c1, "precious\n", "%sthe file behind the link is untouched", label);

        /* A link as the last directory. */
        link_to("srv/sub", "home/s");
        write_expect("home/s/k2.json", NULL, -ELOOP, "/home/s is a symbolic link", "a link as the last directory");

        /* A link at the name itself is replaced, never followed. */
        link_to("srv/sub/k2.json", "home/k.json");
        write_expect("home/k.json", NULL, 0, NULL, "a link as the last component");
        _cleanup_free_ char *c2 = content("srv/sub/k2.json"), *c3 = content("home/k.json");
        is_str(c2, "precious\n", "%sthe link's target is untouched", label);
        is_str(c3, "new\n", "%sthe link was replaced by the file", label);
        _cleanup_free_ char *k = path_in("home/k.json");
        ok(lstat(k, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600,
           "%sa regular file of mode 0600 now", label);

        /* Missing and non-directory components are named too. */
        write_expect("home/none/x.json", NULL, -ENOENT, "/home/none: No such file or directory",
                     "a missing component");
        write_expect("home/k.json/x.json", NULL, -ENOTDIR, "/home/k.json: Not a directory", "a file as a component");
        ok(no_temp_files("home") && no_temp_files("srv"), "%sno temporary file is left behind", label);
}

static void test_user_rights(void) {
        SpawnUser u = other_user();
        struct stat st;

        /* A directory root may write to and the user may not: refused. */
        dir("root-only", 0755, -1);
        write_expect("root-only/k.json", &u, -EACCES, "cannot create a file in", "a directory the user cannot write");
        _cleanup_free_ char *p = path_in("root-only/k.json");
        ok(access(p, F_OK) < 0 && errno == ENOENT, "%snothing was written there", label);

        /* A directory the user cannot even search. */
        dir("closed", 0700, -1);
        dir("closed/inner", 0777, -1);
        write_expect("closed/inner/k.json", &u, -EACCES, "/closed/inner: uid 4321 may not search",
                     "a component the user cannot search");

        /* The user's own directory: written, owned by the user, 0600. */
        dir("mine", 0755, OTHER_ID);
        write_expect("mine/k.json", &u, 0, NULL, "the user's own directory");
        _cleanup_free_ char *m = path_in("mine/k.json");
        ok(stat(m, &st) == 0 && st.st_uid == OTHER_ID && st.st_gid == OTHER_ID && (st.st_mode & 07777) == 0600,
           "%sthe file belongs to uid %d and has mode 0600", label, OTHER_ID);
}

/* user_dir_enter: whether the user may chdir into a directory, with its rights, not root's. */
static void test_enter(void) {
        SpawnUser u = other_user();
        _cleanup_free_ char *closed = path_in("enter-closed"), *inner = path_in("enter-closed/inner"),
                            *open_dir = path_in("enter-open"), *reason = NULL, *want = NULL;
        int r;

        dir("enter-closed", 0700, -1);
        dir("enter-closed/inner", 0755, -1);
        dir("enter-open", 0755, -1);
        r = user_dir_enter(closed, &u, &reason);
        if (asprintf(&want, "uid 4321 cannot enter %s: Permission denied", closed) < 0)
                abort();
        is_int(r, -EACCES, "enter: a directory root may enter and the user not is refused");
        is_str(reason, want, "enter: the reason names the user and the directory");
        free(reason);
        reason = NULL;
        is_int(user_dir_enter(inner, &u, &reason), -EACCES, "enter: so is one below it");
        is_int(user_dir_enter(closed, NULL, NULL), 0, "enter: the daemon's own identity (root) enters it");
        is_int(user_dir_enter(open_dir, &u, NULL), 0, "enter: a directory the user may search");
        is_int(user_dir_enter("relative", &u, NULL), -EINVAL, "enter: a relative path is refused");
}

/* Sticky directories: the user's rights decide for a user; root is held to the same rule. */
static void test_sticky(void) {
        SpawnUser u = other_user();

        dir("sticky", 01777, -1);
        put("sticky/users.json", "theirs\n", 0644, OTHER_ID);
        put("sticky/roots.json", "root's\n", 0644, -1);
        write_expect("sticky/users.json", NULL, -EPERM, "belongs to uid 4321 in a sticky directory",
                     "root over another user's file in a sticky directory");
        _cleanup_free_ char *c1 = content("sticky/users.json");
        is_str(c1, "theirs\n", "%sthe user's file is untouched", label);
        write_expect("sticky/roots.json", NULL, 0, NULL, "root over its own file in a sticky directory");
        write_expect("sticky/roots.json", &u, -EPERM, "cannot replace",
                     "a user over root's file in a sticky directory");
        _cleanup_free_ char *c2 = content("sticky/roots.json");
        is_str(c2, "new\n", "%sroot's file keeps root's content", label);
        write_expect("sticky/users.json", &u, 0, NULL, "a user over their own file in a sticky directory");
        ok(no_temp_files("sticky"), "%sno temporary file is left behind", label);
}

/* Removes tmpdir/rel as u; checks the return value and the reason as write_expect does. */
static void remove_expect(const char *rel, const SpawnUser *u, int want_r, const char *want_reason, const char *name) {
        _cleanup_free_ char *p = path_in(rel), *reason = NULL;
        int r;

        r = user_file_remove(p, u, &reason);
        is_int(r, want_r, "%sremove, %s: returns %d", label, name, want_r);
        if (want_reason)
                ok(reason && strstr(reason, want_reason), "%sremove, %s: the reason says \"%s\" (got: %s)", label,
                   name, want_reason, reason ?: "none");
}

static bool exists(const char *rel) {
        _cleanup_free_ char *p = path_in(rel);
        struct stat st;

        return lstat(p, &st) == 0;
}

/* user_file_remove: the file goes, with the user's rights, never through a link; what is not a regular file stays. */
static void test_remove(void) {
        SpawnUser u = other_user();

        dir("rm", 0755, OTHER_ID);
        put("rm/k.json", "key\n", 0600, OTHER_ID);
        remove_expect("rm/k.json", &u, 0, NULL, "the user's file in the user's directory");
        ok(!exists("rm/k.json"), "%sremove: the file is gone", label);
        remove_expect("rm/k.json", &u, 0, NULL, "a file that is not there (success)");

        /* A link at the name: not what the daemon wrote; neither it nor its target is removed. */
        dir("rm-target", 0755, -1);
        put("rm-target/precious", "precious\n", 0644, -1);
        link_to("rm-target/precious", "rm/link.json");
        remove_expect("rm/link.json", &u, -EMEDIUMTYPE, "is not a regular file", "a link at the name");
        ok(exists("rm/link.json") && exists("rm-target/precious"), "%sremove: the link and its target stay", label);

        /* A link in a component of the directory. */
        put("rm-target/k.json", "root's\n", 0644, -1);
        link_to("rm-target", "rm/dir");
        remove_expect("rm/dir/k.json", NULL, -ELOOP, "/rm/dir is a symbolic link", "a link as a component");
        ok(exists("rm-target/k.json"), "%sremove: the file behind the link stays", label);

        /* The user's rights decide: root's directory refuses the user. */
        remove_expect("rm-target/k.json", &u, -EACCES, "cannot remove", "a directory the user cannot write");
        ok(exists("rm-target/k.json"), "%sremove: root's file stays", label);
}

/* Everything again with openat2 answering ENOSYS, in a child (the filter cannot be removed). */
static void run_without_openat2(void) {
        struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { .len = ELEMENTSOF(filter), .filter = filter };
        int counts[2], p[2];
        pid_t pid;

        if (pipe(p) < 0)
                abort();
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                        _exit(2);
                ok(syscall(SYS_openat2, AT_FDCWD, "/", NULL, 0) < 0 && errno == ENOSYS,
                   "(no openat2) the filter makes openat2 fail with ENOSYS");
                label = "(no openat2) ";
                test_links();
                test_user_rights();
                test_remove();
                counts[0] = tap_n;
                counts[1] = tap_failed;
                (void) !write(p[1], counts, sizeof counts);
                _exit(0);
        }
        close(p[1]);
        if (read(p[0], counts, sizeof counts) == sizeof counts) {
                tap_n = counts[0];
                tap_failed = counts[1];
        } else
                ok(false, "the child without openat2 reported");
        close(p[0]);
        (void) waitpid(pid, NULL, 0);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

int main(void) {
        if (geteuid() != 0)
                skip_all("needs root: it writes as another uid and in a root-owned sticky directory");
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %m\n");
                return 1;
        }
        /* The other uid must reach the test's directories, as a user reaches their home. */
        chmod(tmpdir, 0755);

        test_links();
        test_user_rights();
        test_sticky();
        test_remove();
        test_enter();

        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (!mkdtemp(strcpy(tmpdir, "/tmp/test-userfile.XXXXXX")))
                return 1;
        chmod(tmpdir, 0755);
        run_without_openat2();

        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return tap_done();
}

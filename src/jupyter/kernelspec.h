/* Kernelspecs: the kernel.json files Jupyter installs under <dir>/kernels/NAME/, found the way jupyter_client
 * finds them, so that a context can say `kernel = ir` instead of spelling out R's argv.
 *
 * The directories are searched in jupyter_client's order: each directory of JUPYTER_PATH, the user's data
 * directory (~/.local/share/jupyter), /usr/local/share/jupyter and /usr/share/jupyter; the first that holds
 * kernels/NAME/kernel.json wins. Names are compared as jupyter_client does, lowercased.
 *
 * The daemon reads these files as root for a kernel that runs as the context's user, so it trusts only what
 * that user could have written anyway: kernel.json, its directory and the kernels/ directory above it must
 * each be owned by root or by that user, not writable by group or others, and not a symbolic link; the file
 * is at most KERNELSPEC_FILE_MAX bytes. A spec that fails this is skipped in a listing and named as refused
 * when it is the one asked for. A user's specs are read with that user's rights (KernelspecUser), so no link
 * of theirs reaches what they could not read; for a kernel run as root only places that root alone can change
 * are searched.
 *
 * Pure apart from reading those directories. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* kernel.json files are a few hundred bytes; this bounds what a planted one can cost. */
#define KERNELSPEC_FILE_MAX (64 * 1024)

/* The directories searched when JUPYTER_PATH is empty and there is no home, in order. */
#define KERNELSPEC_SYSTEM_DIRS "/usr/local/share/jupyter", "/usr/share/jupyter"

/* How a kernel is interrupted (kernel.json's "interrupt_mode"). */
typedef enum InterruptMode {
        INTERRUPT_SIGNAL,  /* SIGINT to the kernel's process group (the default) */
        INTERRUPT_MESSAGE, /* an interrupt_request on the control channel */
        _INTERRUPT_MODE_MAX,
} InterruptMode;

/* "signal", "message"; NULL out of range. */
const char *interrupt_mode_to_string(InterruptMode m);

typedef struct Kernelspec {
        char *name;         /* lowercased */
        char *path;         /* the kernel.json read */
        char **argv;        /* NULL-terminated; {connection_file} became {kernel_file}, {resource_dir} the
                             * spec's directory; argv[0] is absolute (looked up in PATH when it was not) */
        char **env;         /* "K=V" from "env", NULL-terminated, never NULL */
        char *language;     /* NULL when the spec names none */
        char *display_name; /* NULL when the spec names none */
        InterruptMode interrupt_mode;
} Kernelspec;

Kernelspec *kernelspec_free(Kernelspec *k);
static inline void kernelspec_freep(Kernelspec **k) {
        kernelspec_free(*k);
}

/* Whether name is a kernelspec name: 1 to 64 ASCII letters, digits, '.', '_' or '-' (jupyter_client's
 * characters; it lowercases them). */
bool kernelspec_name_valid(const char *name);

/* The directories searched, each ending in "/kernels", in order: jupyter_path (':'-separated; NULL or "" for
 * none), home's ".local/share/jupyter" (home NULL: none), then the system ones. A new vector. */
int kernelspec_dirs(const char *jupyter_path, const char *home, char ***ret);

/* Parses the text of a kernel.json (len bytes; read from path, inside resource_dir) named name. path_env is the
 * PATH that a relative argv[0] is looked up in (NULL: the spec's own env PATH, else
 * /usr/local/bin:/usr/bin:/bin). On -EINVAL, *ret_reason (newly allocated) says what is wrong: "argv: expected
 * a non-empty array of strings". */
int kernelspec_parse(const char *text, size_t len, const char *name, const char *path, const char *resource_dir,
                     const char *path_env, Kernelspec **ret, char **ret_reason);

/* Whose kernelspecs are looked for, and with whose rights they are read. */
typedef struct KernelspecUser {
        uid_t uid; /* files owned by root or uid are trusted; 0: only root's, in places only root can change */
        gid_t gid;
        gid_t *groups; /* supplementary groups; kernelspec_user_lookup()'s own */
        size_t n_groups;
        /* Read with uid, gid and groups as the calling thread's file-system identity (setfsuid, setfsgid and
         * setgroups as raw syscalls, which change only this thread), taken back before returning: the daemon
         * then reads nothing that user could not read, through whatever links the user planted. False: with
         * the daemon's own rights (the daemon is not root, or uid is its own). */
        bool switch_fs;
} KernelspecUser;

/* The user named name (NULL: the one of uid) with its primary and supplementary groups (getpwnam_r or
 * getpwuid_r, getgrouplist; thread-safe), switch_fs set when the process runs as root and the user's uid is
 * another; *ret_home (may be NULL) is its home, newly allocated. A user with no passwd entry: -ESRCH, and *ret
 * is then root's without a home, so that only root's places count for it. Free with kernelspec_user_done(). */
int kernelspec_user_lookup(const char *name, uid_t uid, KernelspecUser *ret, char **ret_home);
void kernelspec_user_done(KernelspecUser *u);

/* Finds name in dirs (kernelspec_dirs()) for a kernel run as u->uid. For uid 0 a kernels directory is searched
 * only when no one but root can change it (it and every directory above it owned by root; one that others may
 * write has the sticky bit); one that fails this is skipped. 0 with *ret; -ENOENT when no directory holds it
 * (*ret_reason then lists the directories searched and each skipped one with why); -EPERM, -ELOOP, -EFBIG or
 * -EINVAL when the first that holds it is refused (not trusted, a link, too large, malformed): then *ret_reason
 * (newly allocated) names the file and why. *ret_users (may be NULL), on failure: whether u->uid could have
 * caused it, because the refused file, or for -ENOENT one of the directories searched, lies where that user can
 * write (always false for uid 0). -ENOMEM, or -EPERM when the identity cannot be taken (no reason then). */
int kernelspec_find(char *const *dirs, const char *name, const KernelspecUser *u, const char *path_env,
                    Kernelspec **ret, char **ret_reason, bool *ret_users);

/* Bounds on one listing (kernelctl kernels), so that a home of many specs costs a bounded amount. */
typedef struct KernelspecLimits {
        size_t max_specs;   /* specs returned */
        size_t max_entries; /* directory entries looked at, over all directories */
        size_t max_bytes;   /* kernelspec_reply_size() of the specs returned, summed */
} KernelspecLimits;

#define KERNELSPEC_LIST_MAX_SPECS 1000
#define KERNELSPEC_LIST_MAX_ENTRIES 20000
#define KERNELSPEC_LIST_MAX_BYTES (2 * 1024 * 1024)

/* About how many bytes k takes in a reply: its strings as JSON escapes them, plus the names of the fields. */
size_t kernelspec_reply_size(const Kernelspec *k);

/* Every kernelspec in dirs for u (with its rights when u->switch_fs, the same trust as kernelspec_find), the
 * first of each name, sorted by name; refused ones are left out. limits NULL: none. The scan stops at a limit:
 * *ret_cut (newly allocated; ret_cut may be NULL) then says which ("more than 1000 kernelspecs"), else is NULL.
 * *ret is a new array of *ret_n specs (free each, then the array). */
int kernelspec_list(char *const *dirs, const KernelspecUser *u, const KernelspecLimits *limits, Kernelspec ***ret,
                    size_t *ret_n, char **ret_cut);

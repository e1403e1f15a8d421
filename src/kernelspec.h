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
 * when it is the one asked for.
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

/* Finds name in dirs (kernelspec_dirs()) for a kernel run as uid. 0 with *ret; -ENOENT when no directory holds
 * it; -EPERM, -ELOOP, -EFBIG or -EINVAL when the first that holds it is refused (not trusted, a link, too
 * large, malformed): then *ret_reason (newly allocated) names the file and why. -ENOMEM. */
int kernelspec_find(char *const *dirs, const char *name, uid_t uid, const char *path_env, Kernelspec **ret,
                    char **ret_reason);

/* Every kernelspec in dirs for uid, the first of each name, sorted by name; refused ones are left out.
 * *ret is a new array of *ret_n specs (free each, then the array). */
int kernelspec_list(char *const *dirs, uid_t uid, Kernelspec ***ret, size_t *ret_n);

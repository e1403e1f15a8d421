/* libFuzzer harness: a kernel.json as a user may write it. kernelspec_parse() must take any text: either a spec
 * whose argv is non-empty with an absolute argv[0] and no {connection_file} left, whose env holds only K=V, or
 * -EINVAL with a reason. The same text as <scratch>/jp/kernels/fuzz/kernel.json must then be listed by
 * kernelspec_list() exactly when kernelspec_find() finds it (a refusal has a reason), without a cut. */
#include "fuzz-util.h"
#include "kernelspec.h"
#include "util.h"

static void check_spec(const Kernelspec *k) {
        FUZZ_CHECK(k->argv && k->argv[0] && k->argv[0][0] == '/');
        for (size_t i = 0; k->argv[i]; i++)
                FUZZ_CHECK(!strstr(k->argv[i], "{connection_file}"));
        FUZZ_CHECK(k->env);
        for (size_t i = 0; k->env[i]; i++)
                FUZZ_CHECK(strchr(k->env[i], '=') && k->env[i][0] != '=');
        FUZZ_CHECK(k->interrupt_mode == INTERRUPT_SIGNAL || k->interrupt_mode == INTERRUPT_MESSAGE);
        FUZZ_CHECK(kernelspec_reply_size(k) >= 128);
}

/* <scratch>/jp/kernels/fuzz/kernel.json holding data; the directories made once. */
static char **spec_dirs(const uint8_t *data, size_t size) {
        static char **dirs;
        const char *jp = fuzz_path(1, "jp");

        if (!dirs) {
                (void) mkdir(jp, 0755);
                (void) mkdir(fuzz_path(2, "jp/kernels"), 0755);
                (void) mkdir(fuzz_path(2, "jp/kernels/fuzz"), 0755);
                if (kernelspec_dirs(jp, NULL, &dirs) < 0)
                        abort();
                for (size_t i = 1; dirs[i]; i++) { /* only jp: the system directories hold this machine's */
                        free(dirs[i]);
                        dirs[i] = NULL;
                }
        }
        fuzz_write(fuzz_path(2, "jp/kernels/fuzz/kernel.json"), data, size);
        (void) chmod(fuzz_path(2, "jp/kernels/fuzz/kernel.json"), 0644);
        return dirs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const KernelspecLimits limits = { .max_specs = 10, .max_entries = 100, .max_bytes = 1 << 20 };
        KernelspecUser u = { .uid = geteuid() };
        Kernelspec *k = NULL, *found = NULL, **list = NULL;
        char *reason = NULL, *cut = NULL, **dirs;
        size_t n = 0;
        int r, rf;

        r = kernelspec_parse((const char *) data, size, "Fuzz", "/fuzz/dir/kernel.json", "/fuzz/dir", "/usr/bin:/bin",
                             &k, &reason);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
        FUZZ_CHECK(r == -EINVAL ? reason != NULL : reason == NULL);
        if (r == 0) {
                check_spec(k);
                FUZZ_CHECK(streq(k->name, "fuzz"));
        }
        free(reason);
        reason = NULL;
        kernelspec_free(k);

        if (size > KERNELSPEC_FILE_MAX)
                return 0;
        dirs = spec_dirs(data, size);
        FUZZ_CHECK(kernelspec_list(dirs, &u, &limits, &list, &n, &cut) == 0);
        FUZZ_CHECK(!cut && n <= 1);
        /* path_env NULL, as the listing reads it: the spec's own PATH, else the default. */
        rf = kernelspec_find(dirs, "FUZZ", &u, NULL, &found, &reason, NULL);
        FUZZ_CHECK(rf == 0 ? !reason && found : reason && !found);
        FUZZ_CHECK((rf == 0) == (n == 1));
        if (found)
                check_spec(found);
        for (size_t i = 0; i < n; i++) {
                check_spec(list[i]);
                kernelspec_free(list[i]);
        }
        free(list);
        free(reason);
        kernelspec_free(found);
        return 0;
}

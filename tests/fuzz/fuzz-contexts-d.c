/* libFuzzer harness: files in contexts_dir, next to a fixed main file. The
 * input is cut at each line "%%" into up to three files a.ini, b.ini and
 * c.ini, read in that order, so that what crosses files (a context defined
 * twice, two contexts sharing a connection file) is reached too. */
#include "config.h"
#include "fuzz-util.h"

#define SEPARATOR "\n%%\n"

static void contexts_dir_setup(const char *dir, const char *main_path) {
        char text[8192];
        int n;

        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                fuzz_die(dir);
        n = snprintf(text, sizeof text,
                     "[supervisor]\ncontexts_dir = %s\nport_range = 20000-20099\n"
                     "[defaults]\nrestart = on-failure\nenv = A=1\n[context:main]\nautostart = no\n",
                     dir);
        fuzz_write(main_path, text, (size_t) n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const char *const names[] = { "a.ini", "b.ini", "c.ini" };
        const char *dir = fuzz_path(0, "contexts.d"), *main_path = fuzz_path(1, "kernelsup.ini");
        ConfigDefaults d = {
                .runtime_dir = "/run/kernelsup-fuzz",
                .state_dir = "/var/lib/kernelsup-fuzz",
                .contexts_dir = dir,
        };
        const uint8_t *p = data, *end = data + size;
        Config *c = NULL;
        char *error = NULL;
        int r;

        contexts_dir_setup(dir, main_path);
        for (size_t i = 0; i < 3; i++) {
                char file[4300];
                const uint8_t *sep = p ? memmem(p, (size_t) (end - p), SEPARATOR, strlen(SEPARATOR)) : NULL;

                snprintf(file, sizeof file, "%s/%s", dir, names[i]);
                if (!p) {
                        (void) unlink(file);
                        continue;
                }
                fuzz_write(file, p, (size_t) ((sep && i < 2 ? sep : end) - p));
                p = sep && i < 2 ? sep + strlen(SEPARATOR) : NULL;
        }

        r = config_load(main_path, &d, &c, &error);
        if (r >= 0) {
                FUZZ_CHECK(c && !error && config_find_context(c, "main"));
                for (size_t i = 1; i < c->n_contexts; i++)
                        FUZZ_CHECK(strcmp(c->contexts[i - 1].name, c->contexts[i].name) < 0);
        } else if (r == -EINVAL)
                /* Errors name the file: the main one or one in contexts_dir. */
                FUZZ_CHECK(error && (strncmp(error, dir, strlen(dir)) == 0 ||
                                     strncmp(error, main_path, strlen(main_path)) == 0));
        config_free(c);
        free(error);
        return 0;
}

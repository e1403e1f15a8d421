/* libFuzzer harness: the main configuration file, through config_load() as
 * kernelsupd --check-config reads it (inih and our own line checks, every
 * key's parser, the cross-key checks). contexts_dir is a missing directory
 * unless the input names one. */
#include "config.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *path = fuzz_path(0, "kernelsup.ini");
        ConfigDefaults d = {
                .runtime_dir = "/run/kernelsup-fuzz",
                .state_dir = "/var/lib/kernelsup-fuzz",
                .contexts_dir = fuzz_path(1, "no-contexts.d"),
        };
        Config *c = NULL;
        char *error = NULL;
        int r;

        fuzz_write(path, data, size);
        r = config_load(path, &d, &c, &error);
        if (r >= 0) {
                FUZZ_CHECK(c && !error);
                for (size_t i = 0; i < c->n_contexts; i++) {
                        FUZZ_CHECK(c->contexts[i].name && c->contexts[i].connection_file && c->contexts[i].argv);
                        FUZZ_CHECK(config_find_context(c, c->contexts[i].name) == &c->contexts[i]);
                }
                FUZZ_CHECK(c->port_min > 0 && c->port_min <= c->port_max);
        } else if (r == -EINVAL)
                /* Every refusal is explained to the person at the terminal. */
                FUZZ_CHECK(error && *error);
        config_free(c);
        free(error);
        return 0;
}

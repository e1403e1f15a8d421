/* libFuzzer harness: the state-file readers, from a state directory as the
 * daemon finds it after a crash or a full disk.
 *   first byte even: the rest is contexts/NAME.json, read by
 *     context_state_load(); what it accepts is saved again and must load
 *     back the same (context_state_to_json equal);
 *   first byte odd: the rest is supervisor.json, read by
 *     state_supervisor_start(), which moves a corrupt file aside and never
 *     fails on one (only on I/O, or a generation that cannot count on). */
#include <fcntl.h>

#include "fuzz-util.h"
#include "state.h"

static void check_context(int dirfd, const uint8_t *data, size_t size) {
        char path[4300];
        ContextState s = {}, back = {};
        json_t *a, *b;

        snprintf(path, sizeof path, "%s/contexts/fuzz.json", fuzz_path(0, "state"));
        fuzz_write(path, data, size);
        if (context_state_load(dirfd, "fuzz", &s) < 0)
                return;
        FUZZ_CHECK(context_state_save(dirfd, "again", &s) == 0);
        FUZZ_CHECK(context_state_load(dirfd, "again", &back) == 0);
        a = context_state_to_json(&s);
        b = context_state_to_json(&back);
        FUZZ_CHECK(a && b && json_equal(a, b));
        json_decref(a);
        json_decref(b);
        context_state_done(&s);
        context_state_done(&back);
}

static void check_supervisor(int dirfd, const uint8_t *data, size_t size) {
        SupervisorState s;
        int r;

        fuzz_write(fuzz_path(1, "state/supervisor.json"), data, size);
        r = state_supervisor_start(dirfd, &s);
        /* A generation at its maximum cannot count on (-EOVERFLOW); nothing else refuses a start. */
        FUZZ_CHECK(r == 0 || r == 1 || r == -EOVERFLOW);
        FUZZ_CHECK(r < 0 || (s.generation >= 1 && s.pid == getpid()));
        (void) unlinkat(dirfd, "supervisor.json.corrupt", 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int dirfd = fuzz_state_dir("contexts");

        if (size < 1)
                return 0;
        if (data[0] & 1)
                check_supervisor(dirfd, data + 1, size - 1);
        else
                check_context(dirfd, data + 1, size - 1);
        return 0;
}

/* libFuzzer harness: the connection-file reader (what ipykernel or we
 * wrote). Property: what it accepts, written back by
 * connection_info_format(), reads back the same. */
#include "connfile.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text = fuzz_strndup(data, size);
        ConnectionInfo ci, back;

        memset(&ci, 0xaa, sizeof ci);
        if (connection_info_parse(text, &ci) == 0) {
                char *again = connection_info_format(&ci);

                FUZZ_CHECK(memchr(ci.ip, '\0', sizeof ci.ip) && memchr(ci.key, '\0', sizeof ci.key));
                for (Channel c = 0; c < _CHANNEL_MAX; c++)
                        FUZZ_CHECK(ci.ports[c] > 0);
                FUZZ_CHECK(again);
                FUZZ_CHECK(connection_info_parse(again, &back) == 0);
                FUZZ_CHECK(strcmp(back.ip, ci.ip) == 0 && strcmp(back.key, ci.key) == 0 &&
                           memcmp(back.ports, ci.ports, sizeof ci.ports) == 0);
                free(again);
        }
        free(text);
        return 0;
}

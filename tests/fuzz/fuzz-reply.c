/* libFuzzer harness: the decoders of reply.c, which kernelctl runs on whatever the daemon (or
 * whoever listens on its socket) sends. The input is one JSON value, decoded as every reply
 * type. Properties: a decoder accepts or says which member it refuses, and leaves nothing
 * allocated either way; what it accepts encodes, and that JSON decodes again and encodes to the
 * same text (encoding is a fixed point after one round). */
#include "fuzz-util.h"
#include "protocol.h"
#include "reply.h"

static char *dump(const json_t *j) {
        return json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

#define CHECK_TYPE(kind, Type, j)                                                                                     \
        do {                                                                                                          \
                ReplyProblem problem_ = {};                                                                           \
                Type v_, again_;                                                                                      \
                json_t *once_ = NULL, *twice_ = NULL;                                                                 \
                char *a_, *b_;                                                                                        \
                int r_ = reply_##kind##_decode(j, &v_, &problem_);                                                    \
                if (r_ < 0) {                                                                                         \
                        FUZZ_CHECK(r_ == -EBADMSG || r_ == -ENOMEM);                                                  \
                        FUZZ_CHECK(r_ == -ENOMEM || problem_.text[0]);                                                \
                        break;                                                                                        \
                }                                                                                                     \
                r_ = reply_##kind##_encode(&v_, &once_);                                                              \
                FUZZ_CHECK(r_ == 0 || r_ == -ENOMEM);                                                                 \
                if (r_ == 0)                                                                                          \
                        r_ = reply_##kind##_decode(once_, &again_, &problem_);                                        \
                FUZZ_CHECK(r_ == 0 || r_ == -ENOMEM);                                                                 \
                if (r_ == 0) {                                                                                        \
                        FUZZ_CHECK(reply_##kind##_encode(&again_, &twice_) == 0);                                     \
                        a_ = dump(once_);                                                                             \
                        b_ = dump(twice_);                                                                            \
                        FUZZ_CHECK(a_ &&b_ &&strcmp(a_, b_) == 0);                                                    \
                        free(a_);                                                                                     \
                        free(b_);                                                                                     \
                        json_decref(twice_);                                                                          \
                        reply_##kind##_done(&again_);                                                                 \
                }                                                                                                     \
                json_decref(once_);                                                                                   \
                reply_##kind##_done(&v_);                                                                             \
        } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_error_t error;
        json_t *j;

        if (size > PROTOCOL_MAX_LINE)
                return -1;
        j = json_loadb((const char *) data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &error);
        if (!j)
                return 0;
        CHECK_TYPE(status, ReplyStatus, j);
        CHECK_TYPE(check, ReplyCheck, j);
        CHECK_TYPE(context, ReplyContext, j);
        CHECK_TYPE(timed_out, ReplyTimedOut, j);
        CHECK_TYPE(output, ReplyOutput, j);
        CHECK_TYPE(exec_result, ReplyExecResult, j);
        CHECK_TYPE(execution, ReplyExecution, j);
        CHECK_TYPE(executions, ReplyExecutions, j);
        CHECK_TYPE(interrupt, ReplyInterrupt, j);
        CHECK_TYPE(metrics, ReplyMetrics, j);
        CHECK_TYPE(kernels, ReplyKernels, j);
        CHECK_TYPE(report, ReplyReport, j);
        CHECK_TYPE(history, ReplyHistory, j);
        CHECK_TYPE(error, ReplyError, j);
        json_decref(j);
        return 0;
}

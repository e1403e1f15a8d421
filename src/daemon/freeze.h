/* Telling a freeze of the whole sandbox (a VM paused and resumed, a
 * suspended host, a stopped process group) from time that really passed.
 * libuv's timers run on CLOCK_MONOTONIC, which may or may not count the
 * freeze; CLOCK_BOOTTIME counts a suspend; CLOCK_REALTIME jumps to the wall
 * time when the guest resyncs. Comparing the three between two samples shows
 * the jump. Pure: the caller takes the samples. */
#pragma once

#include "macro.h"

typedef struct ClockSample {
        usec_t realtime, monotonic, boottime;
} ClockSample;

void clock_sample(ClockSample *ret);

/* The length of a freeze between prev and now, or 0 when there was none.
 * expected is the longest the loop could legitimately have taken between
 * the two samples (the tick period plus scheduling slack); threshold is the
 * smallest jump that counts. A freeze shows as any of:
 *   - realtime or boottime advanced more than monotonic: time the monotonic
 *     clock did not count (a paused VM, a suspend);
 *   - monotonic advanced more than expected: the loop itself was held (the
 *     process or the whole VM stopped while monotonic kept counting).
 * A clock going backwards (realtime set back) is not a freeze. */
usec_t freeze_detect(const ClockSample *prev, const ClockSample *now, usec_t expected, usec_t threshold);

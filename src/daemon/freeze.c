#include <time.h>

#include "freeze.h"
#include "util.h"

void clock_sample(ClockSample *ret) {
        *ret = (ClockSample){
                .realtime = now_usec(CLOCK_REALTIME),
                .monotonic = now_usec(CLOCK_MONOTONIC),
                .boottime = now_usec(CLOCK_BOOTTIME),
        };
}

/* b - a when b is later, else 0. */
static usec_t delta(usec_t a, usec_t b) {
        return b > a ? b - a : 0;
}

usec_t freeze_detect(const ClockSample *prev, const ClockSample *now, usec_t expected, usec_t threshold) {
        usec_t mono = delta(prev->monotonic, now->monotonic);
        usec_t real = delta(prev->realtime, now->realtime);
        usec_t boot = delta(prev->boottime, now->boottime);
        usec_t jump = 0;

        /* Monotonic never goes back: samples out of order say nothing. */
        if (now->monotonic < prev->monotonic)
                return 0;

        /* Time other clocks saw pass and monotonic did not. */
        if (real > mono)
                jump = real - mono;
        if (boot > mono && boot - mono > jump)
                jump = boot - mono;
        /* The loop was held longer than it could have been by load alone. */
        if (mono > expected && mono - expected > jump)
                jump = mono - expected;
        return jump >= threshold ? jump : 0;
}

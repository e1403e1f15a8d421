/* The freeze detector over clock samples: the jumps a paused VM, a suspend or
 * a stopped loop leave, and what is not a freeze. */
#include "freeze.h"
#include "tap.h"

#define S USEC_PER_SEC
#define MS USEC_PER_MSEC

static ClockSample at(usec_t real, usec_t mono, usec_t boot) {
        return (ClockSample){ .realtime = real, .monotonic = mono, .boottime = boot };
}

int main(void) {
        const usec_t expected = 1 * S + 500 * MS, threshold = 2 * S;
        ClockSample a = at(1700000000 * S, 1000 * S, 1000 * S), b;
        ClockSample now;

        /* A normal 1 s tick: all three advance together. */
        b = at(a.realtime + 1 * S, a.monotonic + 1 * S, a.boottime + 1 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 0, "a normal tick is no freeze");

        /* A late tick under load (1.4 s), within the slack. */
        b = at(a.realtime + 1400 * MS, a.monotonic + 1400 * MS, a.boottime + 1400 * MS);
        is_int(freeze_detect(&a, &b, expected, threshold), 0, "a tick late by load is no freeze");

        /* A paused VM whose monotonic clock stopped too: wall time jumps by 10 min at resync. */
        b = at(a.realtime + 600 * S + 1 * S, a.monotonic + 1 * S, a.boottime + 1 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 600 * S, "paused VM: the realtime jump is the freeze");

        /* A suspend: boottime counts it, monotonic does not (realtime may lag its resync). */
        b = at(a.realtime + 1 * S, a.monotonic + 1 * S, a.boottime + 3600 * S + 1 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 3600 * S, "suspend: the boottime jump is the freeze");

        /* A freeze that monotonic counted (the process was stopped): the tick came 90 s late. */
        b = at(a.realtime + 91 * S, a.monotonic + 91 * S, a.boottime + 91 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 91 * S - expected, "a stopped loop: late by 89.5 s");

        /* Below the threshold: a 1.5 s hiccup is not reported. */
        b = at(a.realtime + 2500 * MS, a.monotonic + 2500 * MS, a.boottime + 2500 * MS);
        is_int(freeze_detect(&a, &b, expected, threshold), 0, "a 1 s hiccup is below the threshold");

        /* The wall clock set backwards (NTP step): not a freeze, and no underflow. */
        b = at(a.realtime - 3600 * S, a.monotonic + 1 * S, a.boottime + 1 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 0, "realtime stepped back is no freeze");

        /* Samples out of order (now before prev) give 0, never a huge unsigned value. */
        is_int(freeze_detect(&b, &a, expected, threshold), 0, "reversed samples give 0");

        /* The largest of the signals wins. */
        b = at(a.realtime + 120 * S, a.monotonic + 31 * S, a.boottime + 50 * S);
        is_int(freeze_detect(&a, &b, expected, threshold), 89 * S, "largest signal: realtime 120 - mono 31");

        /* Real clocks: two samples in a row show no freeze. */
        clock_sample(&a);
        clock_sample(&now);
        is_int(freeze_detect(&a, &now, expected, threshold), 0, "two real samples: no freeze");
        ok(now.monotonic >= a.monotonic && now.boottime >= now.monotonic / 2, "real samples are ordered");

        return tap_done();
}

/* The OpenMetrics text exposition (application/openmetrics-text;
 * version=1.0.0) of the daemon and its contexts: the control method
 * "metrics", printed by `kernelctl metrics`. Pure: it reads the counters the
 * contexts and their cell queues keep (context_counters, exec_queue_counters)
 * and the daemon's values it is given; it changes nothing. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "context.h"

#define METRICS_CONTENT_TYPE "application/openmetrics-text; version=1.0.0; charset=utf-8"

/* The daemon's own values. */
typedef struct MetricsDaemon {
        const char *version;
        uint64_t generation;
        uint64_t resumes;
        double uptime; /* seconds */
        /* Root or the daemon's own uid: the daemon-wide values below are shown
         * (they tell about other users' activity); another uid sees the
         * contexts it is given and the daemon's identity only. */
        bool privileged;
        uint64_t control_connections;
        uint64_t rss; /* bytes; 0: unknown */
} MetricsDaemon;

/* Renders d and the n contexts (all of them the peer may see, in the order
 * given) into *ret (newly allocated, NUL-terminated, ending in "# EOF\n").
 * -ENOMEM. */
int metrics_render(const MetricsDaemon *d, Context *const *contexts, size_t n, char **ret);

/* Writes s as the inside of an OpenMetrics label value: backslash, double
 * quote and line feed escaped (\\, \", \n), everything else as it is. */
void metrics_write_label_value(FILE *f, const char *s);

/* The process's resident set size in bytes, from /proc/self/statm. */
int metrics_rss(uint64_t *ret);

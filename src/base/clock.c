/* clock.c — the one monotonic clock of the library (declared in base.h).
 *
 * Every timing in kiln (search measurements, e-graph time limits, compile
 * timings, the thread pool's spin bound, the probes) reads this clock, so
 * they all agree on what a second is. Invariant: never goes backwards
 * (CLOCK_MONOTONIC); the origin is arbitrary, so only differences mean
 * anything.
 */
#include <time.h>

#include "base.h"

int64_t kiln_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

double kiln_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Clocks and pauses for the interruptible waits: no CUDA, no Python. */
#ifndef STREAMS_CLOCK_H
#define STREAMS_CLOCK_H

#include <sched.h>
#include <time.h>

/* Monotonic clock in nanoseconds. */
static inline long long streams_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void streams_cpu_yield(void) { sched_yield(); }

/* About a quarter microsecond of spinning without a system call, so that a
 * short wait polls often without hammering the driver's locks. */
static inline void streams_cpu_relax(void) {
    int i;
    for (i = 0; i < 64; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

static inline void streams_sleep_ns(long long ns) {
    struct timespec ts;
    ts.tv_sec = ns / 1000000000LL;
    ts.tv_nsec = ns % 1000000000LL;
    nanosleep(&ts, NULL);
}

#endif /* STREAMS_CLOCK_H */

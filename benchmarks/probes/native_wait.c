/* How the way a thread waits changes the cost of a native host-function
 * round trip (cudaLaunchHostFunc of a C function, then wait until it ran),
 * with no Python at all: a loop of cudaStreamQuery with a pause between
 * (an interruptible wait) against CUDA's own synchronize and the
 * alternatives.  A probe, not part of the benchmark table; the
 * Python side is benchmarks/probes/native_host_breakdown.py.
 *
 *   gcc -O2 -I$CUDA_HOME/include benchmarks/probes/native_wait.c \
 *       -L$CUDA_HOME/lib64 -lcudart_static -lpthread -ldl -lrt -o /tmp/native_wait
 *   /tmp/native_wait [ITERS]
 *
 * Every row prints the median (and min, max) over 7 batches of ITERS round
 * trips, in ns per round trip, and checks that every function ran.
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static _Atomic unsigned long long counter;
static void CUDART_CB increment(void *data) { atomic_fetch_add((_Atomic unsigned long long *)data, 1); }

static cudaStream_t s;
static cudaEvent_t ev;

#define CK(call)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorName(e_));                                             \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int query(void) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaErrorNotReady) return 0;
    CK(e);
    return 1;
}

static int equery(void) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) return 0;
    CK(e);
    return 1;
}

static void launch(void) { CK(cudaLaunchHostFunc(s, increment, (void *)&counter)); }

/* The rows. */
static void r_sync(void) { launch(); CK(cudaStreamSynchronize(s)); }

/* an interruptible wait: query, pause, query ... */
static void r_query_pause(void) {
    launch();
    while (!query()) relax();
}

/* the same, with a clock read and an extra pause between queries, as a
 * wait that keeps time slices does */
static void r_query_clock(void) {
    long long end = now_ns() + 5000000;
    launch();
    while (!query() && now_ns() < end) relax();
}

/* a query, then a pause of about `gap` ns between queries */
static long long gap_ns;
static void r_query_gap(void) {
    launch();
    while (!query()) {
        long long until = now_ns() + gap_ns;
        while (now_ns() < until) relax();
    }
}

/* the floor with `gap` ns of busy work after the synchronize (before the
 * next launch), and with it between the launch and the synchronize: the
 * work an interpreter does around the two calls */
static void busy(long long ns) {
    long long until = now_ns() + ns;
    while (now_ns() < until) relax();
}
static void r_sync_then_busy(void) { launch(); CK(cudaStreamSynchronize(s)); busy(gap_ns); }
static void r_busy_between(void) { launch(); busy(gap_ns); CK(cudaStreamSynchronize(s)); }

static void r_query_yield(void) {
    launch();
    while (!query()) sched_yield();
}

/* one query first (streams' idle fast path), then the plain synchronize */
static void r_query_then_sync(void) {
    launch();
    if (!query()) CK(cudaStreamSynchronize(s));
}

/* record an event behind the host function, poll the event */
static void r_event_poll(void) {
    launch();
    CK(cudaEventRecord(ev, s));
    while (!equery()) relax();
}

static void r_event_sync(void) {
    launch();
    CK(cudaEventRecord(ev, s));
    CK(cudaEventSynchronize(ev));
}

/* Poll a word the host function's own thread wrote: what a wait would cost
 * if completion were seen without the driver (the function writes memory);
 * then the plain synchronize, which returns at once if the stream is done. */
static void r_counter_then_sync(void) {
    unsigned long long want = atomic_load(&counter) + 1;
    launch();
    while (atomic_load(&counter) < want) relax();
    CK(cudaStreamSynchronize(s));
}

static void r_counter_then_query(void) {
    unsigned long long want = atomic_load(&counter) + 1;
    launch();
    while (atomic_load(&counter) < want) relax();
    while (!query()) relax();
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_n(const char *name, void (*fn)(void), long iters, unsigned long long per) {
    double t[7];
    int k;
    long i;
    unsigned long long before;
    for (i = 0; i < iters / 10 + 10; i++) fn();
    CK(cudaStreamSynchronize(s));
    before = atomic_load(&counter);
    for (k = 0; k < 7; k++) {
        long long t0 = now_ns();
        for (i = 0; i < iters; i++) fn();
        t[k] = (double)(now_ns() - t0) / (double)iters;
    }
    CK(cudaStreamSynchronize(s));
    if (atomic_load(&counter) - before != per * 7ULL * (unsigned long long)iters) {
        fprintf(stderr, "%s: %llu of %ld functions ran\n", name, atomic_load(&counter) - before,
                7 * iters);
        exit(1);
    }
    qsort(t, 7, sizeof t[0], cmpd);
    printf("%-62s %8.0f ns  (min %.0f, max %.0f)\n", name, t[3], t[0], t[6]);
    fflush(stdout);
}

#define bench(name, fn, iters) bench_n(name, fn, iters, 1)

static void idle_query(void) { query(); }
static void idle_sync(void) { CK(cudaStreamSynchronize(s)); }

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 3000;
    static const long gaps[] = {250, 500, 1000, 2000};
    static const long delays[] = {500, 1000, 2000, 3000, 5000, 8000};
    unsigned g;
    char name[96];
    CK(cudaFree(NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    for (int rep = 0; rep < 2; rep++) {
        printf("-- pass %d\n", rep + 1);
        bench("launch + cudaStreamSynchronize (the C floor)", r_sync, iters);
        bench("launch + loop(cudaStreamQuery, pause)", r_query_pause, iters);
        bench("launch + loop(cudaStreamQuery, clock, pause)", r_query_clock, iters);
        for (g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
            gap_ns = gaps[g];
            snprintf(name, sizeof name, "launch + loop(cudaStreamQuery, %lld ns of pauses)", gap_ns);
            bench(name, r_query_gap, iters);
        }
        for (g = 0; g < sizeof delays / sizeof delays[0]; g++) {
            gap_ns = delays[g];
            snprintf(name, sizeof name, "launch + cudaStreamSynchronize + %lld ns busy", gap_ns);
            bench(name, r_sync_then_busy, iters);
            snprintf(name, sizeof name, "launch + %lld ns busy + cudaStreamSynchronize", gap_ns);
            bench(name, r_busy_between, iters);
        }
        bench("launch + loop(cudaStreamQuery, sched_yield)", r_query_yield, iters);
        bench("launch + cudaStreamQuery once + cudaStreamSynchronize", r_query_then_sync, iters);
        bench("launch + record + loop(cudaEventQuery, pause)", r_event_poll, iters);
        bench("launch + record + cudaEventSynchronize", r_event_sync, iters);
        bench("launch + spin on the function's write + cudaStreamSynchronize",
              r_counter_then_sync, iters);
        bench("launch + spin on the function's write + loop(query, pause)",
              r_counter_then_query, iters);
    }
    bench_n("idle cudaStreamQuery", idle_query, 20000, 0);
    bench_n("idle cudaStreamSynchronize", idle_sync, 20000, 0);
    return 0;
}

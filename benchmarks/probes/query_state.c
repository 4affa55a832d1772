/* What puts a process's cudaStreamQuery on the driver's fast path?
 *
 * On some hosts a query of an idle stream costs ~1.5 us in a fresh process
 * and ~0.2 us after the first device-wide synchronize or cudaFree
 * (docs/benchmarks.rst, "The first device-wide synchronize").
 * Each variant below runs in a process of its own (argv[1]), does one thing
 * after the context exists, then times queries of an idle stream; then a
 * device synchronize, and the same timing again.
 *
 *   gcc -O2 -I$CUDA_HOME/include benchmarks/probes/query_state.c \
 *       -L$CUDA_HOME/lib64 -lcudart_static -lpthread -ldl -lrt -o /tmp/query_state
 *   for v in none free0 devsync devsync_thread streamsync malloc_free \
 *            event_sync spin_flag yield_flag blocking_flag ctx_flags; do /tmp/query_state $v; done
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* Median over 15 batches of the ns per call of `what` (0 query, 1 record,
 * 2 event query). */
static double per_call(int what, cudaStream_t s, cudaEvent_t e) {
    double b[15];
    for (int k = 0; k < 15; k++) {
        double t0 = now_ns();
        for (int i = 0; i < 2000; i++) {
            if (what == 0) cudaStreamQuery(s);
            else if (what == 1) cudaEventRecord(e, s);
            else cudaEventQuery(e);
        }
        b[k] = (now_ns() - t0) / 2000;
        if (what == 1) cudaStreamSynchronize(s);
    }
    qsort(b, 15, sizeof(double), cmp);
    return b[7];
}

static void* sync_device(void* unused) {
    (void)unused;
    cudaDeviceSynchronize();
    return NULL;
}

static void report(const char* when, cudaStream_t s, cudaEvent_t e) {
    double q = per_call(0, s, e), r = per_call(1, s, e), eq = per_call(2, s, e);
    printf("  %-22s query %7.0f ns  record %7.0f ns  event query %7.0f ns\n", when, q, r, eq);
}

int main(int argc, char** argv) {
    const char* v = argc > 1 ? argv[1] : "none";
    unsigned flags = 0;
    if (!strcmp(v, "spin_flag")) flags = cudaDeviceScheduleSpin;
    if (!strcmp(v, "yield_flag")) flags = cudaDeviceScheduleYield;
    if (!strcmp(v, "blocking_flag")) flags = cudaDeviceScheduleBlockingSync;
    if (flags && cudaSetDeviceFlags(flags) != cudaSuccess) {
        printf("%s: cudaSetDeviceFlags failed\n", v);
        return 1;
    }
    cudaStream_t s, s2;
    cudaEvent_t e;
    double t0 = now_ns();
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        printf("no GPU\n");
        return 1;
    }
    double t_init = now_ns() - t0;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    t0 = now_ns();
    if (!strcmp(v, "free0")) cudaFree(0);
    else if (!strcmp(v, "devsync")) cudaDeviceSynchronize();
    else if (!strcmp(v, "devsync_thread")) {
        pthread_t t;
        pthread_create(&t, NULL, sync_device, NULL);
        pthread_join(t, NULL);
    } else if (!strcmp(v, "streamsync")) cudaStreamSynchronize(s);
    else if (!strcmp(v, "malloc_free")) {
        void* p;
        cudaMalloc(&p, 1 << 20);
        cudaFree(p);
    } else if (!strcmp(v, "event_sync")) {
        cudaEventRecord(e, s);
        cudaEventSynchronize(e);
    } else if (!strcmp(v, "ctx_flags")) {
        unsigned f = 0;
        cudaGetDeviceFlags(&f);
        printf("  device flags before: 0x%x\n", f);
    }
    double t_step = now_ns() - t0;
    printf("%s (context %.1f ms, step %.1f us)\n", v, t_init / 1e6, t_step / 1e3);
    report("after the step", s, e);
    unsigned f = 0;
    cudaGetDeviceFlags(&f);
    cudaDeviceSynchronize();
    unsigned f2 = 0;
    cudaGetDeviceFlags(&f2);
    report("after a device sync", s, e);
    if (f != f2) printf("  device flags changed: 0x%x -> 0x%x\n", f, f2);
    return 0;
}

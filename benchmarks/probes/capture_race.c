/* Which driver calls racing a capture on the same stream crash the driver?
 *
 * Four threads launch host functions (cuLaunchHostFunc of a no-op) on one
 * stream while a fifth begins and ends captures on it, for two seconds.
 * Variants (argv[1]):
 *   open        nothing serialized; each captured graph destroyed at once
 *   keep        nothing serialized; graphs destroyed after the race
 *   fenced      begin/end take a write lock (writers first) that every
 *               launch holds for reading (streams' capture fence); graphs destroyed
 *               at once, outside the lock
 *   fenced_all  as fenced, and the graph destroys take the write lock too
 *   fenced_keep as fenced, graphs destroyed after the race
 * Exit status 0: no crash.  A crash kills the process (the caller reports it).
 *
 *   gcc -O2 -I$CUDA_HOME/include benchmarks/probes/capture_race.c -lcuda -lpthread \
 *       -o /tmp/capture_race && /tmp/capture_race fenced
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static CUcontext ctx;
static CUstream stream;
/* Writer-preferring, as streams' fence: with glibc's default (readers first)
 * the four launching threads never let a capture begin or end. */
static pthread_rwlock_t fence = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static volatile int stop;
static int fenced, fence_destroy, keep;
static CUgraph kept[200000];
static int nkept;

static void noop(void* data) { (void)data; }

static void* enqueuer(void* unused) {
    (void)unused;
    cuCtxSetCurrent(ctx);
    while (!stop) {
        if (fenced) pthread_rwlock_rdlock(&fence);
        cuLaunchHostFunc(stream, noop, NULL);
        if (fenced) pthread_rwlock_unlock(&fence);
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
    const char* v = argc > 1 ? argv[1] : "open";
    fenced = !strncmp(v, "fenced", 6);
    fence_destroy = !strcmp(v, "fenced_all");
    keep = !strcmp(v, "keep") || !strcmp(v, "fenced_keep");
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev)) {
        printf("no GPU\n");
        return 2;
    }
    cuCtxSetCurrent(ctx);
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, enqueuer, NULL);
    double end = now_s() + 2.0;
    long captures = 0;
    while (now_s() < end) {
        CUgraph g = NULL;
        if (fenced) pthread_rwlock_wrlock(&fence);
        cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
        if (fenced) pthread_rwlock_unlock(&fence);
        if (fenced) pthread_rwlock_wrlock(&fence);
        CUresult r = cuStreamEndCapture(stream, &g);
        if (fenced) pthread_rwlock_unlock(&fence);
        if (r == CUDA_SUCCESS && g) {
            captures++;
            if (keep && nkept < 200000) kept[nkept++] = g;
            else {
                if (fence_destroy) pthread_rwlock_wrlock(&fence);
                cuGraphDestroy(g);
                if (fence_destroy) pthread_rwlock_unlock(&fence);
            }
        }
    }
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    cuStreamSynchronize(stream);
    for (int i = 0; i < nkept; i++) cuGraphDestroy(kept[i]);
    printf("%s: %ld captures, no crash\n", v, captures);
    return 0;
}

/* C floor of the streams launch-overhead benchmark.
 *
 * Each operation makes exactly the CUDA runtime calls that the Python
 * contenders make, in a plain C loop, so a contender's ratio to this column
 * is what Python and the wrapper add on top of CUDA itself.  Calls are
 * checked as streams checks them: a wrapper must not look slow next to a
 * floor that skips error handling.
 *
 * Usage:
 *   bench_c OP ITERS [BATCHES [WARMUP]]  one measurement, one JSON object
 *   bench_c info                         runtime, driver and device, JSON
 *   bench_c list                         the operations, one a line
 *   bench_c --serve                      lines "run OP ITERS BATCHES WARMUP",
 *                                        "info" or "quit" on stdin, one JSON
 *                                        line back for each
 *
 * Serve mode is what the harness (benchmarks/harness.py) uses: one process,
 * one CUDA context and one loaded library for the whole run, like the
 * Python contenders, and requests interleaved with theirs.
 *
 * The kernels come from the package's own PTX (streams.testing.BUILTIN_PTX),
 * which benchmarks/builders.py writes into streams_ptx.h: nothing here needs
 * nvcc, and the floor launches the very same kernels as streams. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "streams_ptx.h" /* static const char streams_builtin_ptx[] */

#define MAX_BATCHES 100000
#define GRAPH_KERNELS 10

enum {
    OP_STREAM_QUERY,
    OP_STREAM_SYNCHRONIZE,
    OP_EVENT_RECORD,
    OP_EVENT_QUERY,
    OP_STREAM_WAIT_EVENT,
    OP_EVENT_CREATE_DESTROY,
    OP_STREAM_CREATE_DESTROY,
    OP_KERNEL_LAUNCH,
    OP_KERNEL_LAUNCH_SYNC,
    OP_HOST_FUNC_ENQUEUE,
    OP_HOST_FUNC_ROUND_TRIP,
    OP_HOST_FUNC_THROUGHPUT,
    OP_GRAPH_LAUNCH,
    OP_GRAPH_LAUNCH_SYNC,
    OP_COUNT
};

/* Same names as benchmarks/ops.py: the harness sends them verbatim. */
static const char *const op_names[OP_COUNT] = {
    "stream_query",         "stream_synchronize",    "event_record",
    "event_query",          "stream_wait_event",     "event_create_destroy",
    "stream_create_destroy", "kernel_launch",        "kernel_launch_sync",
    "host_func_enqueue",    "host_func_round_trip",  "host_func_throughput",
    "graph_launch",         "graph_launch_sync",
};

static char g_err[1024];

static int fail(const char *what, cudaError_t e) {
    snprintf(g_err, sizeof g_err, "%s: %s: %s", what, cudaGetErrorName(e),
             cudaGetErrorString(e));
    cudaGetLastError(); /* do not let the error leak into the next request */
    return -1;
}

/* On failure: remember what failed and jump to the function's cleanup. */
#define CK(call)                                                   \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) { fail(#call, e_); goto done; }     \
    } while (0)

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static cudaLibrary_t g_lib;
static cudaKernel_t g_empty, g_spin;

static int load_kernels(void) {
    cudaError_t e;
    if (g_lib) return 0;
    e = cudaLibraryLoadData(&g_lib, streams_builtin_ptx, NULL, NULL, 0, NULL, NULL, 0);
    if (e != cudaSuccess) { g_lib = NULL; return fail("cudaLibraryLoadData", e); }
    e = cudaLibraryGetKernel(&g_empty, g_lib, "streams_empty");
    if (e != cudaSuccess) return fail("cudaLibraryGetKernel(streams_empty)", e);
    e = cudaLibraryGetKernel(&g_spin, g_lib, "streams_spin");
    if (e != cudaSuccess) return fail("cudaLibraryGetKernel(streams_spin)", e);
    return 0;
}

static const dim3 one = {1, 1, 1};

static cudaError_t launch_empty(cudaStream_t s) {
    return cudaLaunchKernel((const void *)g_empty, one, one, NULL, 0, s);
}

static cudaError_t launch_spin(cudaStream_t s, unsigned long long ns) {
    void *args[1] = {&ns};
    return cudaLaunchKernel((const void *)g_spin, one, one, args, 0, s);
}

static void CUDART_CB count_callback(void *p) {
    __atomic_fetch_add((unsigned long long *)p, 1ULL, __ATOMIC_RELAXED);
}

typedef struct {
    cudaStream_t s, other;
    cudaEvent_t ev;        /* recorded by event_record */
    cudaEvent_t done_ev;   /* recorded on `other` and complete: queried, waited on */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    unsigned long long callbacks; /* host functions that have run */
    unsigned long long enqueued;
    double spin_ns;        /* how long host_func_enqueue keeps the stream busy */
} bench_t;

static int setup(int op, bench_t *b) {
    int i;
    memset(b, 0, sizeof *b);
    /* The flags streams.Stream() and streams.Event() use by default. */
    CK(cudaStreamCreateWithFlags(&b->s, cudaStreamDefault));
    CK(cudaStreamCreateWithFlags(&b->other, cudaStreamDefault));
    CK(cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&b->done_ev, cudaEventDisableTiming));
    CK(cudaEventRecord(b->done_ev, b->other));
    CK(cudaStreamSynchronize(b->other));
    if (load_kernels()) return -1;
    if (op == OP_GRAPH_LAUNCH || op == OP_GRAPH_LAUNCH_SYNC) {
        CK(cudaStreamBeginCapture(b->s, cudaStreamCaptureModeThreadLocal));
        for (i = 0; i < GRAPH_KERNELS; i++) {
            cudaError_t e = launch_empty(b->s);
            if (e != cudaSuccess) {
                cudaGraph_t g = NULL;
                cudaStreamEndCapture(b->s, &g);
                if (g) cudaGraphDestroy(g);
                return fail("cudaLaunchKernel (capture)", e);
            }
        }
        CK(cudaStreamEndCapture(b->s, &b->graph));
        CK(cudaGraphInstantiate(&b->exec, b->graph, 0));
        CK(cudaGraphUpload(b->exec, b->s));
        CK(cudaStreamSynchronize(b->s));
    }
    return 0;
done:
    return -1;
}

static void teardown(bench_t *b) {
    if (b->s) cudaStreamSynchronize(b->s);
    if (b->exec) cudaGraphExecDestroy(b->exec);
    if (b->graph) cudaGraphDestroy(b->graph);
    if (b->ev) cudaEventDestroy(b->ev);
    if (b->done_ev) cudaEventDestroy(b->done_ev);
    if (b->s) cudaStreamDestroy(b->s);
    if (b->other) cudaStreamDestroy(b->other);
    cudaGetLastError();
}

/* One timed batch of n calls; *elapsed gets the wall time in ns.
 * *drained is set when a host_func_enqueue batch outlasted the spin kernel
 * (callbacks may then have run during the timing). */
static int batch(int op, bench_t *b, long n, long long *elapsed, int *drained) {
    long i;
    long long t0, t1;
    cudaStream_t s = b->s;
    *drained = 0;
    if (op == OP_HOST_FUNC_ENQUEUE) {
        /* Untimed: keep the stream busy so no callback runs while enqueueing. */
        if (b->spin_ns <= 0) b->spin_ns = (double)n * 20000.0 + 1e6;
        CK(launch_spin(s, (unsigned long long)b->spin_ns));
    }
    t0 = now_ns();
    switch (op) {
    case OP_STREAM_QUERY:
        for (i = 0; i < n; i++) CK(cudaStreamQuery(s));
        break;
    case OP_STREAM_SYNCHRONIZE:
        for (i = 0; i < n; i++) CK(cudaStreamSynchronize(s));
        break;
    case OP_EVENT_RECORD:
        for (i = 0; i < n; i++) CK(cudaEventRecord(b->ev, s));
        break;
    case OP_EVENT_QUERY:
        for (i = 0; i < n; i++) CK(cudaEventQuery(b->done_ev));
        break;
    case OP_STREAM_WAIT_EVENT:
        for (i = 0; i < n; i++) CK(cudaStreamWaitEvent(s, b->done_ev, 0));
        break;
    case OP_EVENT_CREATE_DESTROY:
        for (i = 0; i < n; i++) {
            cudaEvent_t e;
            CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            CK(cudaEventDestroy(e));
        }
        break;
    case OP_STREAM_CREATE_DESTROY:
        for (i = 0; i < n; i++) {
            cudaStream_t t;
            /* The call streams.Stream() makes (priority 0 is in every range). */
            CK(cudaStreamCreateWithPriority(&t, cudaStreamDefault, 0));
            CK(cudaStreamDestroy(t));
        }
        break;
    case OP_KERNEL_LAUNCH:
        for (i = 0; i < n; i++) CK(launch_empty(s));
        break;
    case OP_KERNEL_LAUNCH_SYNC:
        for (i = 0; i < n; i++) {
            CK(launch_empty(s));
            CK(cudaStreamSynchronize(s));
        }
        break;
    case OP_HOST_FUNC_ENQUEUE:
        for (i = 0; i < n; i++) CK(cudaLaunchHostFunc(s, count_callback, &b->callbacks));
        break;
    case OP_HOST_FUNC_ROUND_TRIP:
        for (i = 0; i < n; i++) {
            CK(cudaLaunchHostFunc(s, count_callback, &b->callbacks));
            CK(cudaStreamSynchronize(s));
        }
        break;
    case OP_HOST_FUNC_THROUGHPUT:
        for (i = 0; i < n; i++) CK(cudaLaunchHostFunc(s, count_callback, &b->callbacks));
        CK(cudaStreamSynchronize(s));
        break;
    case OP_GRAPH_LAUNCH:
        for (i = 0; i < n; i++) CK(cudaGraphLaunch(b->exec, s));
        break;
    case OP_GRAPH_LAUNCH_SYNC:
        for (i = 0; i < n; i++) {
            CK(cudaGraphLaunch(b->exec, s));
            CK(cudaStreamSynchronize(s));
        }
        break;
    default:
        snprintf(g_err, sizeof g_err, "operation %d not implemented", op);
        return -1;
    }
    t1 = now_ns();
    *elapsed = t1 - t0;
    if (op == OP_HOST_FUNC_ENQUEUE) {
        *drained = cudaStreamQuery(s) == cudaSuccess;
        cudaGetLastError(); /* cudaErrorNotReady is the expected answer */
        /* Next batch: three times what this one took, so the spin outlasts
         * the enqueueing without making every batch wait for long. */
        b->spin_ns = 3.0 * (double)*elapsed + 5e5;
        if (b->spin_ns < 1e6) b->spin_ns = 1e6;
    }
    /* Untimed: drain what the batch enqueued, so the next batch never waits
     * for a full queue (that would time the GPU, not the call). */
    CK(cudaStreamSynchronize(s));
    if (op >= OP_HOST_FUNC_ENQUEUE && op <= OP_HOST_FUNC_THROUGHPUT) {
        b->enqueued += (unsigned long long)n;
        if (__atomic_load_n(&b->callbacks, __ATOMIC_RELAXED) != b->enqueued) {
            snprintf(g_err, sizeof g_err, "%llu host functions enqueued but %llu ran",
                     b->enqueued, __atomic_load_n(&b->callbacks, __ATOMIC_RELAXED));
            return -1;
        }
    }
    return 0;
done:
    if (op == OP_HOST_FUNC_ENQUEUE) cudaStreamSynchronize(s);
    return -1;
}

static void print_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void reply_error(const char *key, const char *msg) {
    printf("{\"ok\": false, \"%s\": ", key);
    print_json_string(stdout, msg);
    printf("}\n");
    fflush(stdout);
}

static int find_op(const char *name) {
    int i;
    for (i = 0; i < OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}

static int run(const char *name, long iters, int batches, int warmup) {
    static double ns[MAX_BATCHES];
    bench_t b;
    int op = find_op(name), k, drained_total = 0, drained, rc = -1;
    long long elapsed;
    if (op < 0) {
        snprintf(g_err, sizeof g_err, "unknown operation %s", name);
        reply_error("na", g_err);
        return 1;
    }
    if (iters < 1 || batches < 1 || batches > MAX_BATCHES || warmup < 0) {
        reply_error("error", "iters and batches must be >= 1 (batches <= 100000), warmup >= 0");
        return 1;
    }
    if (setup(op, &b) == 0) {
        for (k = 0; k < warmup + batches; k++) {
            if (batch(op, &b, iters, &elapsed, &drained)) break;
            if (k >= warmup) {
                ns[k - warmup] = (double)elapsed / (double)iters;
                drained_total += drained;
            }
        }
        rc = k == warmup + batches ? 0 : -1;
    }
    teardown(&b);
    if (rc) {
        reply_error("error", g_err);
        return 1;
    }
    printf("{\"ok\": true, \"op\": \"%s\", \"iters\": %ld, \"drained\": %d, \"ns\": [",
           name, iters, drained_total);
    for (k = 0; k < batches; k++) printf(k ? ", %.3f" : "%.3f", ns[k]);
    printf("]}\n");
    fflush(stdout);
    return 0;
}

static int info(void) {
    int runtime = 0, driver = 0, count = 0, major = 0, minor = 0;
    struct cudaDeviceProp prop;
    cudaError_t e;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    e = cudaGetDeviceCount(&count);
    printf("{\"ok\": true, \"cuda_headers\": %d, \"runtime_version\": %d, "
           "\"driver_version\": %d, \"device_count\": %d, \"compiler\": ",
           CUDART_VERSION, runtime, driver, e == cudaSuccess ? count : 0);
#ifdef __VERSION__
    print_json_string(stdout, __VERSION__);
#else
    printf("null");
#endif
    if (e == cudaSuccess && count > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
        printf(", \"device\": ");
        print_json_string(stdout, prop.name);
        printf(", \"compute_capability\": [%d, %d]", major, minor);
    } else if (e != cudaSuccess) {
        printf(", \"device_error\": ");
        print_json_string(stdout, cudaGetErrorString(e));
        cudaGetLastError();
    }
    printf("}\n");
    fflush(stdout);
    return 0;
}

static int serve(void) {
    char line[512], name[128];
    long iters;
    int batches, warmup;
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "quit", 4) == 0) break;
        if (strncmp(line, "info", 4) == 0) {
            info();
        } else if (sscanf(line, "run %127s %ld %d %d", name, &iters, &batches, &warmup) == 4) {
            run(name, iters, batches, warmup);
        } else {
            reply_error("error", "expected: run OP ITERS BATCHES WARMUP | info | quit");
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int i;
    if (argc >= 2 && strcmp(argv[1], "list") == 0) {
        for (i = 0; i < OP_COUNT; i++) puts(op_names[i]);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "info") == 0) return info();
    /* Create the context up front, so the first request is not the one
     * that pays for it (its warm-up batch would absorb it anyway). */
    cudaFree(NULL);
    cudaGetLastError();
    if (argc >= 2 && strcmp(argv[1], "--serve") == 0) return serve();
    if (argc < 3) {
        fprintf(stderr, "usage: %s OP ITERS [BATCHES [WARMUP]] | info | list | --serve\n",
                argv[0]);
        return 2;
    }
    return run(argv[1], atol(argv[2]), argc > 3 ? atoi(argv[3]) : 10,
               argc > 4 ? atoi(argv[4]) : 1);
}

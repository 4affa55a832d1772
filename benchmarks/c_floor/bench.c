/* The C program of the streams launch-overhead benchmark: the floor's
 * loops (src/floor.h, which streams._cudart runs in the process
 * being measured) in a process of their own, with a CUDA context of their
 * own.  A second reference next to the in-process floor: what the same
 * calls cost where no Python, and no other library, shares the process.
 *
 * Usage:
 *   bench_c OP ITERS [BATCHES [WARMUP]]  one measurement, one JSON object
 *   bench_c info                         runtime, driver and device, JSON
 *   bench_c list                         the operations, one a line
 *   bench_c --serve                      lines "run OP ITERS BATCHES WARMUP",
 *                                        "info" or "quit" on stdin, one JSON
 *                                        line back for each
 *
 * Serve mode is what the harness (benchmarks/harness.py) uses: one process
 * and one CUDA context for the whole run, like the Python contenders, and
 * requests interleaved with theirs.
 *
 * The kernels come from the package's own PTX (streams.testing.BUILTIN_PTX),
 * which benchmarks/builders.py writes into streams_ptx.h: nothing here needs
 * nvcc, and the program launches the very same kernels as streams. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floor.h" /* src/floor.h */
#include "streams_ptx.h" /* static const char streams_builtin_ptx[] */

#define MAX_BATCHES 100000

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

static int run(const char *name, long iters, int batches, int warmup) {
    static double ns[MAX_BATCHES];
    streams_floor_error_t error;
    char msg[512];
    int op = streams_floor_find_op(name), k, drained_total = 0, drained;
    long long elapsed;
    if (op < 0) {
        snprintf(msg, sizeof msg, "unknown operation %s", name);
        reply_error("na", msg);
        return 1;
    }
    if (iters < 1 || batches < 1 || batches > MAX_BATCHES || warmup < 0) {
        reply_error("error", "iters and batches must be >= 1 (batches <= 100000), warmup >= 0");
        return 1;
    }
    for (k = 0; k < warmup + batches; k++) {
        elapsed = streams_floor_batch(op, iters,
                                      streams_floor_uses_kernels(op) ? streams_builtin_ptx : NULL,
                                      &drained, &error);
        if (elapsed < 0) {
            if (error.err != cudaSuccess)
                snprintf(msg, sizeof msg, "%s: %s: %s", error.what, cudaGetErrorName(error.err),
                         cudaGetErrorString(error.err));
            else
                snprintf(msg, sizeof msg, "%s", error.what);
            reply_error("error", msg);
            return 1;
        }
        if (k >= warmup) {
            ns[k - warmup] = (double)elapsed / (double)iters;
            drained_total += drained;
        }
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
        for (i = 0; i < STREAMS_FLOOR_OP_COUNT; i++) puts(streams_floor_op_names[i]);
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

/* The floor of the launch-overhead benchmark: for each operation of
 * benchmarks/ops.py, the CUDA runtime calls it makes, in a plain C loop.
 *
 * Compiled into streams._cudart, the loops run in the process being
 * measured and through the static cudart that streams itself calls
 * (streams._cudart.floor_batch): a wrapper's ratio to them is what Python
 * and the wrapper add, with nothing of another process (its context, its
 * clocks, its caches) in the comparison.  benchmarks/c_floor/bench.c runs
 * the same loops in a process of its own, as a second reference.
 *
 * Every call is checked, as streams checks it: a wrapper must not look slow
 * next to a floor that skips error handling.  A batch owns what it uses:
 * its streams, events and graphs are made before the timing and destroyed
 * after it, with nothing left queued.  The kernels come from a PTX image
 * that the caller gives (streams' built-in PTX); that library is loaded
 * once and stays for the process, as streams' own built-in kernels do, so
 * that no batch pays for loading or compiling it.
 *
 * No Python here: batches run without the GIL. */
#ifndef STREAMS_FLOOR_H
#define STREAMS_FLOOR_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "streams/clock.h"
#include "cuda_versions.h"

#define STREAMS_FLOOR_GRAPH_KERNELS 10
#define STREAMS_FLOOR_PRODUCERS 8
#define STREAMS_FLOOR_MAX_ARGS 16
/* The copies of memcpy_loop_8 and memcpy_batch_8: 8 of 4 KiB, device to device. */
#define STREAMS_FLOOR_COPIES 8
#define STREAMS_FLOOR_COPY_BYTES 4096
/* A pipeline_inference step: 8 kernels, a host function every 16 steps,
 * enqueued by the step of each 16 numbered 7 from 0: mid-period, so that
 * it runs inside the batch (a batch's last step would leave it to run
 * after the timing); a pipeline_data_loader step: 2 copies
 * (benchmarks/ops.py, STEP_CALLS, HOST_FUNC_AT). */
#define STREAMS_FLOOR_PIPELINE_KERNELS 8
#define STREAMS_FLOOR_HOST_FUNC_EVERY 16
#define STREAMS_FLOOR_HOST_FUNC_AT 7
#define STREAMS_FLOOR_LOADER_COPIES 2
/* The pipelines' slots are the first entries of the copies' arrays
 * (copy_src, copy_dst, copy_size).  C11, as both the extension and the C
 * program are compiled (-std=gnu11). */
_Static_assert(STREAMS_FLOOR_LOADER_COPIES <= STREAMS_FLOOR_COPIES,
               "the copies of a pipeline step must fit the arrays of STREAMS_FLOOR_COPIES");
/* Untimed calls on a batch's fresh handles before its timing: the
 * contenders' handles have served earlier batches already. */
#define STREAMS_FLOOR_WARMUP 4

enum {
    STREAMS_FLOOR_STREAM_QUERY,
    STREAMS_FLOOR_STREAM_SYNCHRONIZE,
    STREAMS_FLOOR_EVENT_RECORD,
    STREAMS_FLOOR_EVENT_QUERY,
    STREAMS_FLOOR_EVENT_RECORD_QUERY,
    STREAMS_FLOOR_STREAM_WAIT_EVENT,
    STREAMS_FLOOR_STREAM_WAIT_STREAM,
    STREAMS_FLOOR_EVENT_CREATE_DESTROY,
    STREAMS_FLOOR_STREAM_CREATE_DESTROY,
    STREAMS_FLOOR_KERNEL_LAUNCH,
    STREAMS_FLOOR_KERNEL_LAUNCH_SYNC,
    STREAMS_FLOOR_KERNEL_LAUNCH_ARGS4,
    STREAMS_FLOOR_KERNEL_LAUNCH_ARGS16,
    STREAMS_FLOOR_PREPARED_LAUNCH,
    STREAMS_FLOOR_HOST_FUNC_ENQUEUE,
    STREAMS_FLOOR_HOST_FUNC_ROUND_TRIP,
    STREAMS_FLOOR_HOST_FUNC_NATIVE_ROUND_TRIP,
    STREAMS_FLOOR_HOST_FUNC_THROUGHPUT,
    STREAMS_FLOOR_HOST_FUNC_THROUGHPUT_8THREADS,
    STREAMS_FLOOR_GRAPH_LAUNCH,
    STREAMS_FLOOR_GRAPH_LAUNCH_SYNC,
    STREAMS_FLOOR_GRAPH_CAPTURE_INSTANTIATE,
    STREAMS_FLOOR_GRAPH_LAUNCH_1,
    STREAMS_FLOOR_GRAPH_LAUNCH_100,
    STREAMS_FLOOR_GRAPH_LAUNCH_1000,
    STREAMS_FLOOR_MEMCPY_LOOP_8,
    STREAMS_FLOOR_MEMCPY_BATCH_8,
    STREAMS_FLOOR_PIPELINE_INFERENCE,
    STREAMS_FLOOR_PIPELINE_DATA_LOADER,
    STREAMS_FLOOR_OP_COUNT
};

/* The names of benchmarks/ops.py, in its order (its tests compare them). */
static const char *const streams_floor_op_names[STREAMS_FLOOR_OP_COUNT] = {
    "stream_query",
    "stream_synchronize",
    "event_record",
    "event_query",
    "event_record_query",
    "stream_wait_event",
    "stream_wait_stream",
    "event_create_destroy",
    "stream_create_destroy",
    "kernel_launch",
    "kernel_launch_sync",
    "kernel_launch_args4",
    "kernel_launch_args16",
    "prepared_launch",
    "host_func_enqueue",
    "host_func_round_trip",
    "host_func_native_round_trip",
    "host_func_throughput",
    "host_func_throughput_8threads",
    "graph_launch",
    "graph_launch_sync",
    "graph_capture_instantiate",
    "graph_launch_1",
    "graph_launch_100",
    "graph_launch_1000",
    "memcpy_loop_8",
    "memcpy_batch_8",
    "pipeline_inference",
    "pipeline_data_loader",
};

/* What failed: `err` is cudaSuccess where it was not a CUDA call. */
typedef struct {
    cudaError_t err;
    char what[256];
} streams_floor_error_t;

typedef struct {
    int op;
    cudaStream_t s, other;
    cudaEvent_t ev;      /* recorded by the timed calls */
    cudaEvent_t done_ev; /* recorded on `other` and complete: queried, waited on */
    cudaKernel_t kernel, spin;
    cudaKernel_t empty;  /* the nodes of pipeline_inference's graph */
    void **kernel_args;  /* NULL for a kernel without parameters, as streams passes */
    void *args[STREAMS_FLOOR_MAX_ARGS];
    unsigned long long slots[STREAMS_FLOOR_MAX_ARGS];
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    void *copy_mem;      /* the copies' sources and destinations, one allocation */
    void *copy_dst[STREAMS_FLOOR_COPIES], *copy_src[STREAMS_FLOOR_COPIES];
    size_t copy_size[STREAMS_FLOOR_COPIES];
    void *pinned;        /* the pipelines' host side: STREAMS_FLOOR_LOADER_COPIES slots */
    unsigned long long callbacks; /* host functions that have run (atomic) */
    unsigned long long enqueued;
    streams_floor_error_t *error;
} streams_floor_batch_t;

static int streams_floor_find_op(const char *name) {
    int i;
    for (i = 0; i < STREAMS_FLOOR_OP_COUNT; i++)
        if (strcmp(streams_floor_op_names[i], name) == 0) return i;
    return -1;
}

static int streams_floor_uses_kernels(int op) {
    return (op >= STREAMS_FLOOR_KERNEL_LAUNCH && op <= STREAMS_FLOOR_HOST_FUNC_ENQUEUE)
           || (op >= STREAMS_FLOOR_GRAPH_LAUNCH && op <= STREAMS_FLOOR_GRAPH_LAUNCH_1000)
           || op == STREAMS_FLOOR_PIPELINE_INFERENCE || op == STREAMS_FLOOR_PIPELINE_DATA_LOADER;
}

static int streams_floor_is_pipeline(int op) {
    return op == STREAMS_FLOOR_PIPELINE_INFERENCE || op == STREAMS_FLOOR_PIPELINE_DATA_LOADER;
}

/* The kernel nodes of the graph that `op` launches (0: none). */
static int streams_floor_graph_nodes(int op) {
    switch (op) {
    case STREAMS_FLOOR_GRAPH_LAUNCH_1:
        return 1;
    case STREAMS_FLOOR_GRAPH_LAUNCH_100:
        return 100;
    case STREAMS_FLOOR_GRAPH_LAUNCH_1000:
        return 1000;
    case STREAMS_FLOOR_GRAPH_LAUNCH:
    case STREAMS_FLOOR_GRAPH_LAUNCH_SYNC:
    case STREAMS_FLOOR_PIPELINE_INFERENCE:
        return STREAMS_FLOOR_GRAPH_KERNELS;
    default:
        return 0;
    }
}

static int streams_floor_fail(streams_floor_error_t *error, const char *what, cudaError_t e) {
    error->err = e;
    snprintf(error->what, sizeof error->what, "%s", what);
    cudaGetLastError(); /* the error must not leak into a later, unrelated call */
    return -1;
}

/* On failure (anything but cudaSuccess and `also_ok`): say which call
 * failed (`what`) and jump to the function's `done`. */
#define STREAMS_FLOOR_CHECK(b, what, call, also_ok)                                \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess && e_ != (also_ok)) {                                \
            streams_floor_fail((b)->error, what, e_);                              \
            goto done;                                                             \
        }                                                                          \
    } while (0)
#define STREAMS_FLOOR_CK(b, call) STREAMS_FLOOR_CHECK(b, #call, call, cudaSuccess)
/* A query's answer: not ready is one, as it is for streams' query(). */
#define STREAMS_FLOOR_CK_QUERY(b, call) STREAMS_FLOOR_CHECK(b, #call, call, cudaErrorNotReady)
#define STREAMS_FLOOR_CK_LAUNCH(b) \
    STREAMS_FLOOR_CHECK(b, "cudaLaunchKernel", streams_floor_launch(b), cudaSuccess)

static pthread_mutex_t streams_floor_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaLibrary_t streams_floor_library;

/* Kernel `name` of the library of `ptx`, loaded with the call streams uses
 * at the first need.  The image must stay valid for the process: the
 * driver may read it again when it loads the library into a context. */
static int streams_floor_kernel(const char *ptx, const char *name, cudaKernel_t *out,
                                streams_floor_error_t *error) {
    char what[128];
    cudaError_t e = cudaSuccess;
    if (ptx == NULL) {
        error->err = cudaSuccess;
        snprintf(error->what, sizeof error->what, "no PTX image for kernel %s", name);
        return -1;
    }
    pthread_mutex_lock(&streams_floor_lock);
    if (streams_floor_library == NULL) {
        e = cudaLibraryLoadData(&streams_floor_library, ptx, NULL, NULL, 0, NULL, NULL, 0);
        if (e != cudaSuccess) streams_floor_library = NULL;
    }
    pthread_mutex_unlock(&streams_floor_lock);
    if (e != cudaSuccess) return streams_floor_fail(error, "cudaLibraryLoadData", e);
    e = cudaLibraryGetKernel(out, streams_floor_library, name);
    if (e == cudaSuccess) return 0;
    snprintf(what, sizeof what, "cudaLibraryGetKernel(%s)", name);
    return streams_floor_fail(error, what, e);
}

static const dim3 streams_floor_one = {1, 1, 1};

static cudaError_t streams_floor_launch(streams_floor_batch_t *b) {
    return cudaLaunchKernel((const void *)b->kernel, streams_floor_one, streams_floor_one,
                            b->kernel_args, 0, b->s);
}

static void CUDART_CB streams_floor_count(void *p) {
    __atomic_fetch_add((unsigned long long *)p, 1ULL, __ATOMIC_RELAXED);
}

/* Capture `nodes` launches of `kernel` (no parameters) on b->s. */
static int streams_floor_capture(streams_floor_batch_t *b, cudaKernel_t kernel, int nodes,
                                 cudaGraph_t *graph) {
    int i;
    STREAMS_FLOOR_CK(b, cudaStreamBeginCapture(b->s, cudaStreamCaptureModeThreadLocal));
    for (i = 0; i < nodes; i++) {
        cudaError_t e = cudaLaunchKernel((const void *)kernel, streams_floor_one,
                                         streams_floor_one, NULL, 0, b->s);
        if (e != cudaSuccess) {
            cudaGraph_t g = NULL;
            cudaStreamEndCapture(b->s, &g); /* leave capture mode either way */
            if (g) cudaGraphDestroy(g);
            return streams_floor_fail(b->error, "cudaLaunchKernel (capture)", e);
        }
    }
    STREAMS_FLOOR_CK(b, cudaStreamEndCapture(b->s, graph));
    return 0;
done:
    return -1;
}

/* One call of graph_capture_instantiate: what Stream.begin_capture,
 * ten launches, end_capture, Graph.instantiate and both close()s make. */
static int streams_floor_capture_instantiate(streams_floor_batch_t *b) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e, e_graph;
    const char *what = "cudaGraphInstantiateWithFlags";
    if (streams_floor_capture(b, b->kernel, STREAMS_FLOOR_GRAPH_KERNELS, &g)) return -1;
    e = cudaGraphInstantiateWithFlags(&x, g, 0);
    if (e == cudaSuccess) {
        e = cudaGraphExecDestroy(x);
        what = "cudaGraphExecDestroy";
    }
    e_graph = cudaGraphDestroy(g);
    if (e != cudaSuccess) return streams_floor_fail(b->error, what, e);
    if (e_graph != cudaSuccess) return streams_floor_fail(b->error, "cudaGraphDestroy", e_graph);
    return 0;
}

static int streams_floor_setup(streams_floor_batch_t *b, const char *ptx) {
    const char *kernel = NULL;
    int i, nargs = 0, nodes = streams_floor_graph_nodes(b->op);
    /* The calls streams.Stream() and streams.Event() make by default. */
    STREAMS_FLOOR_CK(b, cudaStreamCreate(&b->s));
    STREAMS_FLOOR_CK(b, cudaStreamCreate(&b->other));
    STREAMS_FLOOR_CK(b, cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming));
    STREAMS_FLOOR_CK(b, cudaEventCreateWithFlags(&b->done_ev, cudaEventDisableTiming));
    STREAMS_FLOOR_CK(b, cudaEventRecord(b->done_ev, b->other));
    STREAMS_FLOOR_CK(b, cudaStreamSynchronize(b->other));
    if (b->op == STREAMS_FLOOR_KERNEL_LAUNCH_ARGS4 || streams_floor_is_pipeline(b->op)) {
        kernel = "streams_args4";
        nargs = 4;
    } else if (b->op == STREAMS_FLOOR_KERNEL_LAUNCH_ARGS16) {
        kernel = "streams_args16";
        nargs = 16;
    } else if (b->op == STREAMS_FLOOR_HOST_FUNC_ENQUEUE) {
        if (streams_floor_kernel(ptx, "streams_spin", &b->spin, b->error)) return -1;
    } else if (streams_floor_uses_kernels(b->op)) {
        kernel = "streams_empty";
    }
    if (kernel && streams_floor_kernel(ptx, kernel, &b->kernel, b->error)) return -1;
    if (b->op == STREAMS_FLOOR_PIPELINE_INFERENCE
        && streams_floor_kernel(ptx, "streams_empty", &b->empty, b->error))
        return -1;
    /* Zero for every parameter: an empty kernel reads none, and what a
     * launch costs does not depend on the values. */
    for (i = 0; i < nargs; i++) b->args[i] = &b->slots[i];
    b->kernel_args = nargs ? b->args : NULL;
    if (b->op == STREAMS_FLOOR_MEMCPY_LOOP_8 || b->op == STREAMS_FLOOR_MEMCPY_BATCH_8) {
        char *mem;
        STREAMS_FLOOR_CK(b, cudaMalloc(&b->copy_mem,
                                       2 * STREAMS_FLOOR_COPIES * STREAMS_FLOOR_COPY_BYTES));
        mem = (char *)b->copy_mem;
        for (i = 0; i < STREAMS_FLOOR_COPIES; i++) {
            b->copy_src[i] = mem + (size_t)i * STREAMS_FLOOR_COPY_BYTES;
            b->copy_dst[i] = mem + (size_t)(STREAMS_FLOOR_COPIES + i) * STREAMS_FLOOR_COPY_BYTES;
            b->copy_size[i] = STREAMS_FLOOR_COPY_BYTES;
        }
    }
    if (streams_floor_is_pipeline(b->op)) {
        /* Device and pinned slots of 4 KiB: the inference step copies the
         * first device slot into the first pinned one, the data loader each
         * pinned slot into its device slot. */
        char *dev, *host;
        STREAMS_FLOOR_CK(b, cudaMalloc(&b->copy_mem,
                                       STREAMS_FLOOR_LOADER_COPIES * STREAMS_FLOOR_COPY_BYTES));
        STREAMS_FLOOR_CK(b, cudaMallocHost(&b->pinned,
                                           STREAMS_FLOOR_LOADER_COPIES * STREAMS_FLOOR_COPY_BYTES));
        dev = (char *)b->copy_mem;
        host = (char *)b->pinned;
        for (i = 0; i < STREAMS_FLOOR_LOADER_COPIES; i++) {
            int load = b->op == STREAMS_FLOOR_PIPELINE_DATA_LOADER;
            char *d = dev + (size_t)i * STREAMS_FLOOR_COPY_BYTES;
            char *h = host + (size_t)i * STREAMS_FLOOR_COPY_BYTES;
            b->copy_src[i] = load ? h : d;
            b->copy_dst[i] = load ? d : h;
            b->copy_size[i] = STREAMS_FLOOR_COPY_BYTES;
        }
    }
    if (nodes) {
        cudaKernel_t node = b->op == STREAMS_FLOOR_PIPELINE_INFERENCE ? b->empty : b->kernel;
        if (streams_floor_capture(b, node, nodes, &b->graph)) return -1;
        STREAMS_FLOOR_CK(b, cudaGraphInstantiateWithFlags(&b->exec, b->graph, 0));
        STREAMS_FLOOR_CK(b, cudaGraphUpload(b->exec, b->s));
        STREAMS_FLOOR_CK(b, cudaStreamSynchronize(b->s));
    }
    return 0;
done:
    return -1;
}

/* Keep the first of a clean-up's failures in *first (what is empty until then). */
static void streams_floor_undo(streams_floor_error_t *first, const char *what, cudaError_t e) {
    if (e != cudaSuccess && !first->what[0]) {
        first->err = e;
        snprintf(first->what, sizeof first->what, "%s", what);
    }
}
#define STREAMS_FLOOR_UNDO(first, call) streams_floor_undo(first, #call, call)

/* Destroy what the batch made, every step tried whatever failed before.
 * 0, or -1 with the clean-up's first failure in b->error where that holds
 * no earlier one: a handle or an allocation that outlives its batch is an
 * error of the batch, never a silent leak. */
static int streams_floor_teardown(streams_floor_batch_t *b) {
    streams_floor_error_t first;
    first.err = cudaSuccess;
    first.what[0] = 0;
    /* First: host functions still queued write into *b. */
    if (b->s) STREAMS_FLOOR_UNDO(&first, cudaStreamSynchronize(b->s));
    if (b->other) STREAMS_FLOOR_UNDO(&first, cudaStreamSynchronize(b->other));
    if (b->exec) STREAMS_FLOOR_UNDO(&first, cudaGraphExecDestroy(b->exec));
    if (b->graph) STREAMS_FLOOR_UNDO(&first, cudaGraphDestroy(b->graph));
    if (b->ev) STREAMS_FLOOR_UNDO(&first, cudaEventDestroy(b->ev));
    if (b->done_ev) STREAMS_FLOOR_UNDO(&first, cudaEventDestroy(b->done_ev));
    if (b->s) STREAMS_FLOOR_UNDO(&first, cudaStreamDestroy(b->s));
    if (b->other) STREAMS_FLOOR_UNDO(&first, cudaStreamDestroy(b->other));
    if (b->copy_mem) STREAMS_FLOOR_UNDO(&first, cudaFree(b->copy_mem));
    if (b->pinned) STREAMS_FLOOR_UNDO(&first, cudaFreeHost(b->pinned));
    cudaGetLastError();
    if (!first.what[0]) return 0;
    if (!b->error->what[0]) *b->error = first;
    return -1;
}

/* n calls of b->op, back to back (every operation but the 8-thread one). */
static int streams_floor_calls(streams_floor_batch_t *b, long n) {
    long i;
    cudaStream_t s = b->s;
    switch (b->op) {
    case STREAMS_FLOOR_STREAM_QUERY:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK_QUERY(b, cudaStreamQuery(s));
        break;
    case STREAMS_FLOOR_STREAM_SYNCHRONIZE:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK(b, cudaStreamSynchronize(s));
        break;
    case STREAMS_FLOOR_EVENT_RECORD:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK(b, cudaEventRecord(b->ev, s));
        break;
    case STREAMS_FLOOR_EVENT_QUERY:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK_QUERY(b, cudaEventQuery(b->done_ev));
        break;
    case STREAMS_FLOOR_EVENT_RECORD_QUERY:
        for (i = 0; i < n; i++) {
            STREAMS_FLOOR_CK(b, cudaEventRecord(b->ev, s));
            STREAMS_FLOOR_CK_QUERY(b, cudaEventQuery(b->ev));
        }
        break;
    case STREAMS_FLOOR_STREAM_WAIT_EVENT:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK(b, cudaStreamWaitEvent(s, b->done_ev, 0));
        break;
    case STREAMS_FLOOR_STREAM_WAIT_STREAM:
        /* What Stream.wait_stream makes: a marker event recorded on the
         * other stream, waited for. */
        for (i = 0; i < n; i++) {
            STREAMS_FLOOR_CK(b, cudaEventRecord(b->ev, b->other));
            STREAMS_FLOOR_CK(b, cudaStreamWaitEvent(s, b->ev, 0));
        }
        break;
    case STREAMS_FLOOR_EVENT_CREATE_DESTROY:
        for (i = 0; i < n; i++) {
            cudaEvent_t e;
            STREAMS_FLOOR_CK(b, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            STREAMS_FLOOR_CK(b, cudaEventDestroy(e));
        }
        break;
    case STREAMS_FLOOR_STREAM_CREATE_DESTROY:
        for (i = 0; i < n; i++) {
            cudaStream_t t;
            STREAMS_FLOOR_CK(b, cudaStreamCreate(&t));
            STREAMS_FLOOR_CK(b, cudaStreamDestroy(t));
        }
        break;
    case STREAMS_FLOOR_KERNEL_LAUNCH:
    case STREAMS_FLOOR_KERNEL_LAUNCH_ARGS4:
    case STREAMS_FLOOR_KERNEL_LAUNCH_ARGS16:
    case STREAMS_FLOOR_PREPARED_LAUNCH:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK_LAUNCH(b);
        break;
    case STREAMS_FLOOR_KERNEL_LAUNCH_SYNC:
        for (i = 0; i < n; i++) {
            STREAMS_FLOOR_CK_LAUNCH(b);
            STREAMS_FLOOR_CK(b, cudaStreamSynchronize(s));
        }
        break;
    case STREAMS_FLOOR_HOST_FUNC_ENQUEUE:
        for (i = 0; i < n; i++)
            STREAMS_FLOOR_CK(b, cudaLaunchHostFunc(s, streams_floor_count, &b->callbacks));
        b->enqueued += (unsigned long long)n;
        break;
    case STREAMS_FLOOR_HOST_FUNC_ROUND_TRIP:
    case STREAMS_FLOOR_HOST_FUNC_NATIVE_ROUND_TRIP:   /* in C, every host function is native */
        for (i = 0; i < n; i++) {
            STREAMS_FLOOR_CK(b, cudaLaunchHostFunc(s, streams_floor_count, &b->callbacks));
            STREAMS_FLOOR_CK(b, cudaStreamSynchronize(s));
        }
        b->enqueued += (unsigned long long)n;
        break;
    case STREAMS_FLOOR_HOST_FUNC_THROUGHPUT:
        for (i = 0; i < n; i++)
            STREAMS_FLOOR_CK(b, cudaLaunchHostFunc(s, streams_floor_count, &b->callbacks));
        b->enqueued += (unsigned long long)n;
        STREAMS_FLOOR_CK(b, cudaStreamSynchronize(s));
        break;
    case STREAMS_FLOOR_GRAPH_LAUNCH:
    case STREAMS_FLOOR_GRAPH_LAUNCH_1:
    case STREAMS_FLOOR_GRAPH_LAUNCH_100:
    case STREAMS_FLOOR_GRAPH_LAUNCH_1000:
        for (i = 0; i < n; i++) STREAMS_FLOOR_CK(b, cudaGraphLaunch(b->exec, s));
        break;
    case STREAMS_FLOOR_GRAPH_LAUNCH_SYNC:
        for (i = 0; i < n; i++) {
            STREAMS_FLOOR_CK(b, cudaGraphLaunch(b->exec, s));
            STREAMS_FLOOR_CK(b, cudaStreamSynchronize(s));
        }
        break;
    case STREAMS_FLOOR_GRAPH_CAPTURE_INSTANTIATE:
        for (i = 0; i < n; i++)
            if (streams_floor_capture_instantiate(b)) return -1;
        break;
    case STREAMS_FLOOR_MEMCPY_LOOP_8:
        for (i = 0; i < n; i++) {
            int j;
            for (j = 0; j < STREAMS_FLOOR_COPIES; j++)
                STREAMS_FLOOR_CK(b, cudaMemcpyAsync(b->copy_dst[j], b->copy_src[j],
                                                    b->copy_size[j], cudaMemcpyDefault, s));
        }
        break;
    case STREAMS_FLOOR_MEMCPY_BATCH_8:
        /* The call streams.memcpy_batch_async makes (compat.h: one
         * stream-ordered attribute for every copy). */
        for (i = 0; i < n; i++)
            STREAMS_FLOOR_CHECK(b, "cudaMemcpyBatchAsync",
                                streams_cudaMemcpyBatchAsync(b->copy_dst, b->copy_src,
                                                             b->copy_size, STREAMS_FLOOR_COPIES,
                                                             s),
                                cudaSuccess);
        break;
    case STREAMS_FLOOR_PIPELINE_INFERENCE:
        /* Compute on s (kernels, the graph), the output stream waits for it,
         * copies the result out and, mid-period, runs a host function. */
        for (i = 0; i < n; i++) {
            int j;
            for (j = 0; j < STREAMS_FLOOR_PIPELINE_KERNELS; j++) STREAMS_FLOOR_CK_LAUNCH(b);
            STREAMS_FLOOR_CK(b, cudaGraphLaunch(b->exec, s));
            STREAMS_FLOOR_CK(b, cudaEventRecord(b->ev, s));
            STREAMS_FLOOR_CK(b, cudaStreamWaitEvent(b->other, b->ev, 0));
            STREAMS_FLOOR_CK(b, cudaMemcpyAsync(b->copy_dst[0], b->copy_src[0], b->copy_size[0],
                                                cudaMemcpyDefault, b->other));
            if (i % STREAMS_FLOOR_HOST_FUNC_EVERY == STREAMS_FLOOR_HOST_FUNC_AT) {
                STREAMS_FLOOR_CK(b, cudaLaunchHostFunc(b->other, streams_floor_count,
                                                       &b->callbacks));
                b->enqueued++;
            }
        }
        break;
    case STREAMS_FLOOR_PIPELINE_DATA_LOADER:
        /* Copies in on the copy stream (`other`), the compute stream (s)
         * waits for them and launches a kernel on what they brought. */
        for (i = 0; i < n; i++) {
            int j;
            for (j = 0; j < STREAMS_FLOOR_LOADER_COPIES; j++)
                STREAMS_FLOOR_CK(b, cudaMemcpyAsync(b->copy_dst[j], b->copy_src[j],
                                                    b->copy_size[j], cudaMemcpyDefault,
                                                    b->other));
            STREAMS_FLOOR_CK(b, cudaEventRecord(b->ev, b->other));
            STREAMS_FLOOR_CK(b, cudaStreamWaitEvent(s, b->ev, 0));
            STREAMS_FLOOR_CK_LAUNCH(b);
        }
        break;
    default:
        b->error->err = cudaSuccess;
        snprintf(b->error->what, sizeof b->error->what, "operation %d has no loop", b->op);
        return -1;
    }
    return 0;
done:
    return -1;
}

/* ---- host_func_throughput_8threads: producer threads on one stream ---- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go, abort;
} streams_floor_gate_t;

typedef struct {
    streams_floor_batch_t *b;
    streams_floor_gate_t *gate;
    int device;
    long calls;
    unsigned long long enqueued;
    streams_floor_error_t error;
} streams_floor_producer_t;

static void *streams_floor_produce(void *arg) {
    streams_floor_producer_t *p = (streams_floor_producer_t *)arg;
    int abort;
    long i;
    /* A new thread's current device is 0: make it the stream's. */
    cudaError_t e = cudaSetDevice(p->device);
    if (e != cudaSuccess) streams_floor_fail(&p->error, "cudaSetDevice (producer thread)", e);
    pthread_mutex_lock(&p->gate->lock);
    while (!p->gate->go) pthread_cond_wait(&p->gate->cond, &p->gate->lock);
    abort = p->gate->abort || e != cudaSuccess;
    pthread_mutex_unlock(&p->gate->lock);
    for (i = 0; i < p->calls && !abort; i++) {
        e = cudaLaunchHostFunc(p->b->s, streams_floor_count, &p->b->callbacks);
        if (e != cudaSuccess) {
            streams_floor_fail(&p->error, "cudaLaunchHostFunc (producer thread)", e);
            break;
        }
        p->enqueued++;
    }
    return NULL;
}

/* n host functions enqueued by STREAMS_FLOOR_PRODUCERS threads at once,
 * until all have run.  The threads are started before the timing and wait
 * at a gate that opens when it starts. */
static int streams_floor_producers(streams_floor_batch_t *b, long n, long long *elapsed) {
    pthread_t threads[STREAMS_FLOOR_PRODUCERS];
    streams_floor_producer_t prod[STREAMS_FLOOR_PRODUCERS];
    streams_floor_gate_t gate;
    int i, device, started = 0, rc = 0;
    long long t0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return streams_floor_fail(b->error, "cudaGetDevice", e);
    pthread_mutex_init(&gate.lock, NULL);
    pthread_cond_init(&gate.cond, NULL);
    gate.go = gate.abort = 0;
    for (i = 0; i < STREAMS_FLOOR_PRODUCERS; i++) {
        memset(&prod[i], 0, sizeof prod[i]);
        prod[i].b = b;
        prod[i].gate = &gate;
        prod[i].device = device;
        prod[i].calls = n / STREAMS_FLOOR_PRODUCERS + (i < n % STREAMS_FLOOR_PRODUCERS);
        if (pthread_create(&threads[i], NULL, streams_floor_produce, &prod[i]) != 0) break;
        started++;
    }
    t0 = streams_now_ns();
    pthread_mutex_lock(&gate.lock);
    gate.go = 1;
    gate.abort = started < STREAMS_FLOOR_PRODUCERS;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    for (i = 0; i < started; i++) pthread_join(threads[i], NULL);
    e = cudaStreamSynchronize(b->s);
    *elapsed = streams_now_ns() - t0;
    for (i = 0; i < started; i++) {
        b->enqueued += prod[i].enqueued;
        if (rc == 0 && prod[i].error.what[0]) {
            *b->error = prod[i].error;
            rc = -1;
        }
    }
    if (rc == 0 && started < STREAMS_FLOOR_PRODUCERS) {
        b->error->err = cudaSuccess;
        snprintf(b->error->what, sizeof b->error->what, "pthread_create failed");
        rc = -1;
    }
    if (rc == 0 && e != cudaSuccess) rc = streams_floor_fail(b->error, "cudaStreamSynchronize", e);
    pthread_cond_destroy(&gate.cond);
    pthread_mutex_destroy(&gate.lock);
    return rc;
}

/* One run of n calls; *elapsed gets its wall time.  *drained (when given)
 * is set where host_func_enqueue outlasted the spin kernel that holds its
 * stream busy, so that callbacks may have run during the timing. */
static int streams_floor_run(streams_floor_batch_t *b, long n, long long *elapsed,
                             int *drained) {
    long long t0;
    if (b->op == STREAMS_FLOOR_HOST_FUNC_THROUGHPUT_8THREADS)
        return streams_floor_producers(b, n, elapsed);
    if (b->op == STREAMS_FLOOR_HOST_FUNC_ENQUEUE) {
        /* Untimed: 20 us of spin a call, ten times what an enqueue takes. */
        unsigned long long ns = (unsigned long long)n * 20000ULL + 1000000ULL;
        void *args[1] = {&ns};
        STREAMS_FLOOR_CK(b, cudaLaunchKernel((const void *)b->spin, streams_floor_one,
                                             streams_floor_one, args, 0, b->s));
    }
    t0 = streams_now_ns();
    if (streams_floor_calls(b, n)) return -1;
    *elapsed = streams_now_ns() - t0;
    if (drained && b->op == STREAMS_FLOOR_HOST_FUNC_ENQUEUE) {
        *drained = cudaStreamQuery(b->s) == cudaSuccess;
        cudaGetLastError(); /* cudaErrorNotReady is the expected answer */
    }
    return 0;
done:
    return -1;
}

/* Untimed, after a run: drain both streams, so that no run waits for a
 * full launch queue (that would time the GPU, not the calls), and check
 * that every host function enqueued has run. */
static int streams_floor_settle(streams_floor_batch_t *b) {
    unsigned long long ran;
    STREAMS_FLOOR_CK(b, cudaStreamSynchronize(b->s));
    STREAMS_FLOOR_CK(b, cudaStreamSynchronize(b->other));
    ran = __atomic_load_n(&b->callbacks, __ATOMIC_RELAXED);
    if (ran != b->enqueued) {
        b->error->err = cudaSuccess;
        snprintf(b->error->what, sizeof b->error->what,
                 "%llu host functions enqueued but %llu ran", b->enqueued, ran);
        return -1;
    }
    return 0;
done:
    return -1;
}

/* The wall time in ns of n calls of `op` (an index of
 * streams_floor_op_names), on handles made for this batch and destroyed
 * after it; -1 with *error filled on failure.  `ptx`: the image holding
 * streams_empty, streams_spin and the argument kernels, for the operations
 * streams_floor_uses_kernels() names (NULL for the others).  *drained: see
 * streams_floor_run. */
static long long streams_floor_batch(int op, long n, const char *ptx, int *drained,
                                     streams_floor_error_t *error) {
    streams_floor_batch_t b;
    long long warm = 0, elapsed = -1;
    memset(&b, 0, sizeof b);
    b.op = op;
    b.error = error;
    error->err = cudaSuccess;
    error->what[0] = 0;
    *drained = 0;
    if (op < 0 || op >= STREAMS_FLOOR_OP_COUNT || n < 1) {
        snprintf(error->what, sizeof error->what, "no operation %d, or n %ld < 1", op, n);
        return -1;
    }
    if (streams_floor_setup(&b, ptx)
        || streams_floor_run(&b, n < STREAMS_FLOOR_WARMUP ? n : STREAMS_FLOOR_WARMUP, &warm,
                             NULL)
        || streams_floor_settle(&b) || streams_floor_run(&b, n, &elapsed, drained)
        || streams_floor_settle(&b))
        elapsed = -1;
    if (streams_floor_teardown(&b)) elapsed = -1;
    return elapsed;
}

#endif /* STREAMS_FLOOR_H */

/* A stand-in for the CUDA runtime, linked into bench.c instead of
 * libcudart_static.a, so that the floor's loops (src/floor.h)
 * run without a GPU: every handle is counted, host functions run at the
 * stream's next synchronize, and at exit the counts of what is still alive
 * go to stderr ("fake-cudart live: ...").  FAKE_CUDART_FAIL=NAME makes the
 * first call of cudart function NAME fail with cudaErrorUnknown.
 * FAKE_CUDART_CALLS=1 adds a line "fake-cudart calls: NAME=N ..." of every
 * function called, with the kernel nodes that graph launches ran as
 * "graph_nodes=N", and a line "fake-cudart on streams: NAME@S=N ..." of the
 * calls that take a stream, by stream: S is the number of streams alive
 * when that one was made (a batch of the floor makes `s` first, 0, then
 * `other`, 1), and a copy's key ends in its direction, ":D2H", ":H2D",
 * ":D2D" or ":H2H" (D: memory of cudaMalloc, H: of cudaMallocHost; P for
 * any other).  Only benchmarks/tests/test_floor.py builds it. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_QUEUED 100000
#define MAX_NAMES 64
#define MAX_KEYS 256
#define MAX_ALLOCS 1024

struct CUstream_st {
    int id; /* streams alive when it was made */
    int capturing, captured;
    int queued;
    cudaHostFn_t fns[MAX_QUEUED];
    void *data[MAX_QUEUED];
};
struct CUevent_st { int recorded; };
struct CUgraph_st { int nodes; };
struct CUgraphExec_st { int nodes; };
struct CUlib_st { const char *image; };
struct CUkern_st { char name[64]; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long live_streams, live_events, live_graphs, live_execs, live_memory, live_pinned, unrun;
static __thread cudaError_t last_error;

/* Calls by function name, in the order of their first call. */
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *call_names[MAX_NAMES];
static long call_counts[MAX_NAMES];

static void count_call(const char *name, long n) {
    int i;
    pthread_mutex_lock(&calls_lock);
    for (i = 0; i < MAX_NAMES && call_names[i] && strcmp(call_names[i], name) != 0; i++) {}
    if (i < MAX_NAMES) {
        call_names[i] = name;
        call_counts[i] += n;
    }
    pthread_mutex_unlock(&calls_lock);
}

/* Calls by stream (and a copy's direction), in the order of their first call. */
static char *key_names[MAX_KEYS];
static long key_counts[MAX_KEYS];

static void count_on(const char *name, cudaStream_t s, const char *dir) {
    char key[96];
    int i;
    if (s) snprintf(key, sizeof key, "%s@%d%s%s", name, s->id, dir ? ":" : "", dir ? dir : "");
    else snprintf(key, sizeof key, "%s@null%s%s", name, dir ? ":" : "", dir ? dir : "");
    pthread_mutex_lock(&calls_lock);
    for (i = 0; i < MAX_KEYS && key_names[i] && strcmp(key_names[i], key) != 0; i++) {}
    if (i < MAX_KEYS) {
        if (!key_names[i]) key_names[i] = strdup(key);
        key_counts[i]++;
    }
    pthread_mutex_unlock(&calls_lock);
}

/* The live allocations, so that a copy knows its direction. */
static struct { const char *base; size_t size; char kind; } allocs[MAX_ALLOCS];

static void track(void *p, size_t n, char kind) {
    int i;
    pthread_mutex_lock(&calls_lock);
    for (i = 0; i < MAX_ALLOCS && allocs[i].base; i++) {}
    if (i < MAX_ALLOCS) {
        allocs[i].base = p;
        allocs[i].size = n;
        allocs[i].kind = kind;
    }
    pthread_mutex_unlock(&calls_lock);
}

static void untrack(void *p) {
    int i;
    pthread_mutex_lock(&calls_lock);
    for (i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base == p) allocs[i].base = NULL;
    pthread_mutex_unlock(&calls_lock);
}

static char kind_of(const void *p) {
    const char *c = p;
    char kind = 'P';
    int i;
    pthread_mutex_lock(&calls_lock);
    for (i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && c >= allocs[i].base && c < allocs[i].base + allocs[i].size)
            kind = allocs[i].kind;
    pthread_mutex_unlock(&calls_lock);
    return kind;
}

static void count_copy(const char *name, void *dst, const void *src, cudaStream_t s) {
    char dir[4] = {kind_of(src), '2', kind_of(dst), 0};
    count_on(name, s, dir);
}

static void report(void) {
    int i;
    fprintf(stderr,
            "fake-cudart live: streams=%ld events=%ld graphs=%ld execs=%ld memory=%ld "
            "pinned=%ld unrun=%ld\n",
            live_streams, live_events, live_graphs, live_execs, live_memory, live_pinned, unrun);
    if (!getenv("FAKE_CUDART_CALLS")) return;
    fprintf(stderr, "fake-cudart calls:");
    for (i = 0; i < MAX_NAMES && call_names[i]; i++)
        fprintf(stderr, " %s=%ld", call_names[i], call_counts[i]);
    fprintf(stderr, "\nfake-cudart on streams:");
    for (i = 0; i < MAX_KEYS && key_names[i]; i++)
        fprintf(stderr, " %s=%ld", key_names[i], key_counts[i]);
    fprintf(stderr, "\n");
}

__attribute__((constructor)) static void init(void) { atexit(report); }

/* cudaErrorUnknown for the first call of the function FAKE_CUDART_FAIL
 * names; every call of a function that may fail this way is counted. */
static cudaError_t injected(const char *name) {
    static int fired;
    const char *target = getenv("FAKE_CUDART_FAIL");
    count_call(name, 1);
    if (!target || strcmp(target, name) != 0 || __atomic_exchange_n(&fired, 1, __ATOMIC_SEQ_CST))
        return cudaSuccess;
    return last_error = cudaErrorUnknown;
}

#define FAIL_IF_ASKED() do { if (injected(__func__)) return cudaErrorUnknown; } while (0)
#define REQUIRE(cond) \
    do { if (!(cond)) return last_error = cudaErrorInvalidResourceHandle; } while (0)

static void *make(size_t size, long *live) {
    __atomic_fetch_add(live, 1, __ATOMIC_SEQ_CST);
    return calloc(1, size);
}

static cudaError_t unmake(void *p, long *live) {
    REQUIRE(p);
    __atomic_fetch_sub(live, 1, __ATOMIC_SEQ_CST);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorFake" : "cudaSuccess"; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "a fake failure" : "no error"; }
cudaError_t cudaMalloc(void **p, size_t n) {
    FAIL_IF_ASKED();
    REQUIRE(n > 0);
    *p = make(n, &live_memory);
    track(*p, n, 'D');
    return cudaSuccess;
}
/* cudaFree(NULL) is how bench.c makes the context: nothing to free. */
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    FAIL_IF_ASKED();
    untrack(p);
    return unmake(p, &live_memory);
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    FAIL_IF_ASKED();
    REQUIRE(n > 0);
    *p = make(n, &live_pinned);
    track(*p, n, 'H');
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    FAIL_IF_ASKED();
    untrack(p);
    return unmake(p, &live_pinned);
}
cudaError_t cudaGetDevice(int *d) {
    FAIL_IF_ASKED();
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    FAIL_IF_ASKED();
    return d == 0 ? cudaSuccess : (last_error = cudaErrorInvalidDevice);
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    (void)p; (void)d;
    return cudaErrorNoDevice;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    (void)a; (void)d;
    *v = 0;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    int id;
    FAIL_IF_ASKED();
    id = (int)__atomic_load_n(&live_streams, __ATOMIC_SEQ_CST);
    *s = make(sizeof **s, &live_streams);
    (*s)->id = id;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(s && !s->queued);
    return unmake(s, &live_streams);
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(s);
    count_on(__func__, s, NULL);
    return s->queued ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    int i, n;
    FAIL_IF_ASKED();
    REQUIRE(s && !s->capturing);
    count_on(__func__, s, NULL);
    pthread_mutex_lock(&lock);
    n = s->queued;
    s->queued = 0;
    pthread_mutex_unlock(&lock);
    for (i = 0; i < n; i++) s->fns[i](s->data[i]);
    __atomic_fetch_sub(&unrun, n, __ATOMIC_SEQ_CST);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    FAIL_IF_ASKED();
    REQUIRE(s && e && e->recorded && flags == 0);
    count_on(__func__, s, NULL);
    return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
    FAIL_IF_ASKED();
    REQUIRE(s && fn && !s->capturing);
    count_on(__func__, s, NULL);
    pthread_mutex_lock(&lock);
    if (s->queued == MAX_QUEUED) {
        pthread_mutex_unlock(&lock);
        return last_error = cudaErrorLaunchOutOfResources;
    }
    s->fns[s->queued] = fn;
    s->data[s->queued++] = data;
    pthread_mutex_unlock(&lock);
    __atomic_fetch_add(&unrun, 1, __ATOMIC_SEQ_CST);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    FAIL_IF_ASKED();
    REQUIRE(flags == cudaEventDisableTiming);
    *e = make(sizeof **e, &live_events);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    FAIL_IF_ASKED();
    return unmake(e, &live_events);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(e && s && !s->capturing);
    count_on(__func__, s, NULL);
    e->recorded = 1;
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    FAIL_IF_ASKED();
    REQUIRE(e && e->recorded);
    return cudaSuccess;
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *o,
                                void **ov, unsigned int no, enum cudaLibraryOption *lo,
                                void **lov, unsigned int nlo) {
    (void)o; (void)ov; (void)no; (void)lo; (void)lov; (void)nlo;
    FAIL_IF_ASKED();
    REQUIRE(code && strstr(code, ".entry"));
    *lib = calloc(1, sizeof **lib); /* stays for the process, as the floor's does */
    (*lib)->image = code;
    return cudaSuccess;
}
cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name) {
    char entry[96];
    FAIL_IF_ASKED();
    REQUIRE(lib);
    snprintf(entry, sizeof entry, ".entry %s(", name);
    if (!strstr(lib->image, entry)) return last_error = cudaErrorSymbolNotFound;
    *k = calloc(1, sizeof **k);
    snprintf((*k)->name, sizeof (*k)->name, "%s", name);
    return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                             size_t shared, cudaStream_t s) {
    const struct CUkern_st *k = func;
    int takes;
    FAIL_IF_ASKED();
    REQUIRE(k && s && grid.x == 1 && block.x == 1 && shared == 0);
    takes = strcmp(k->name, "streams_spin") == 0 ? 1 : strcmp(k->name, "streams_args4") == 0
            ? 4 : strcmp(k->name, "streams_args16") == 0 ? 16 : 0;
    if ((takes == 0) != (args == NULL)) return last_error = cudaErrorInvalidValue;
    if (!s->capturing) count_on(__func__, s, NULL);
    s->captured += s->capturing;
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    FAIL_IF_ASKED();
    REQUIRE(s && !s->capturing && mode == cudaStreamCaptureModeThreadLocal);
    s->capturing = 1;
    s->captured = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    FAIL_IF_ASKED();
    REQUIRE(s && s->capturing);
    s->capturing = 0;
    *g = make(sizeof **g, &live_graphs);
    (*g)->nodes = s->captured;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *x, cudaGraph_t g,
                                          unsigned long long flags) {
    FAIL_IF_ASKED();
    REQUIRE(g && g->nodes >= 1 && flags == 0);
    *x = make(sizeof **x, &live_execs);
    (*x)->nodes = g->nodes;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    FAIL_IF_ASKED();
    return unmake(x, &live_execs);
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    FAIL_IF_ASKED();
    return unmake(g, &live_graphs);
}
cudaError_t cudaGraphUpload(cudaGraphExec_t x, cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(x && s);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(x && s && !s->capturing);
    count_on(__func__, s, NULL);
    count_call("graph_nodes", x->nodes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    FAIL_IF_ASKED();
    REQUIRE(dst && src && s && kind == cudaMemcpyDefault);
    count_copy(__func__, dst, src, s);
    memcpy(dst, src, n);
    return cudaSuccess;
}
#if CUDART_VERSION >= 13000
cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                 size_t count, struct cudaMemcpyAttributes *attrs,
                                 size_t *attrs_idxs, size_t num_attrs, cudaStream_t s) {
#elif CUDART_VERSION >= 12080
cudaError_t cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count,
                                 struct cudaMemcpyAttributes *attrs, size_t *attrs_idxs,
                                 size_t num_attrs, size_t *fail_idx, cudaStream_t s) {
    (void)fail_idx;
#endif
#if CUDART_VERSION >= 12080
    size_t i;
    FAIL_IF_ASKED();
    REQUIRE(s && count > 0 && num_attrs == 1 && attrs_idxs[0] == 0
            && attrs->srcAccessOrder == cudaMemcpySrcAccessOrderStream);
    for (i = 0; i < count; i++) {
        count_copy(__func__, dsts[i], srcs[i], s);
        memcpy(dsts[i], srcs[i], sizes[i]);
    }
    return cudaSuccess;
}
#endif

/* One spelling of the capture and graph-topology functions for CUDA 12 and
 * CUDA 13.  CUDA 12.3 added edge data as `_v3`/`_v2` variants; CUDA 13 folded
 * those into the base names and removed the old forms.  The package calls
 * only the streams_* names below, so the same source builds against both. */
#ifndef STREAMS_CUDA_VERSIONS_H
#define STREAMS_CUDA_VERSIONS_H

#include <string.h>
#include <cuda_runtime_api.h>

#if CUDART_VERSION >= 13000
#define streams_cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo
#define streams_cudaStreamUpdateCaptureDependencies cudaStreamUpdateCaptureDependencies
#define streams_cudaGraphGetEdges cudaGraphGetEdges
#define streams_cudaGraphNodeGetDependencies cudaGraphNodeGetDependencies
#elif CUDART_VERSION >= 12030
#define streams_cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#define streams_cudaStreamUpdateCaptureDependencies cudaStreamUpdateCaptureDependencies_v2
#define streams_cudaGraphGetEdges cudaGraphGetEdges_v2
#define streams_cudaGraphNodeGetDependencies cudaGraphNodeGetDependencies_v2
#else
#error "streams needs CUDA 12.3 or newer (edge data in the capture API)"
#endif

/* Adding a node from generic parameters (what conditional nodes need): CUDA
 * 13 added edge data to cudaGraphAddNode, CUDA 12.3 had it as _v2.  streams
 * passes no edge data. */
#if CUDART_VERSION >= 13000
#define streams_cudaGraphAddNode(node, graph, deps, n, params) \
    cudaGraphAddNode((node), (graph), (deps), NULL, (n), (params))
#else
#define streams_cudaGraphAddNode(node, graph, deps, n, params) \
    cudaGraphAddNode((node), (graph), (deps), (n), (params))
#endif

/* Switch conditional nodes came with CUDA 12.8 headers; the value is the
 * runtime's either way, and an older driver refuses it with an error. */
#define streams_cudaGraphCondTypeSwitch ((enum cudaGraphConditionalNodeType)2)

/* A kernel's parameter layout, which launches are checked against.  Older
 * runtimes cannot tell it: kernels then need an explicit signature. */
#if CUDART_VERSION >= 12060
#define streams_cudaFuncGetParamInfo cudaFuncGetParamInfo
#else
static inline cudaError_t streams_cudaFuncGetParamInfo(const void *func, size_t index,
                                                       size_t *offset, size_t *size) {
    (void)func; (void)index; (void)offset; (void)size;
    return cudaErrorNotSupported;
}
#endif

/* Batched copies (cudaMemcpyBatchAsync): CUDA 12.8 added it with a
 * `failIdx` out-parameter; CUDA 13 dropped that parameter and made the
 * pointer arrays const.  Every copy here is stream-ordered on its source,
 * with no location hints: one attribute entry covers them all.  Older
 * runtimes report cudaErrorNotSupported, which the caller turns into an
 * error that names the version needed. */
#define STREAMS_HAVE_MEMCPY_BATCH (CUDART_VERSION >= 12080)
static inline cudaError_t streams_cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes,
                                                       size_t count, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
    struct cudaMemcpyAttributes attr;
    size_t first = 0;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync((void *const *)dsts, (const void *const *)srcs, sizes, count,
                                &attr, &first, 1, stream);
#else
    size_t fail_idx = 0;
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, count, &attr, &first, 1, &fail_idx, stream);
#endif
#else
    (void)dsts; (void)srcs; (void)sizes; (void)count; (void)stream;
    return cudaErrorNotSupported;
#endif
}

/* Prefetch and advice to a location (a device, the host, a host NUMA
 * node): CUDA 12.2 added them as _v2, CUDA 13 folded them into the base
 * names.  The batched prefetch and discard came with CUDA 13.0: the call
 * layer does not call them before (STREAMS_HAVE_MEM_BATCH), and the
 * caller raises an error that names the version needed; the shims below
 * only keep an older build compiling. */
#if CUDART_VERSION >= 13000
#define streams_cudaMemPrefetchAsync cudaMemPrefetchAsync
#define streams_cudaMemAdvise cudaMemAdvise
#else
#define streams_cudaMemPrefetchAsync cudaMemPrefetchAsync_v2
#define streams_cudaMemAdvise cudaMemAdvise_v2
#endif
#define STREAMS_HAVE_MEM_BATCH (CUDART_VERSION >= 13000)
static inline cudaError_t streams_cudaMemPrefetchBatchAsync(
        void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *locs,
        size_t *loc_idxs, size_t nlocs, int discard, cudaStream_t stream) {
#if STREAMS_HAVE_MEM_BATCH
    if (discard)
        return cudaMemDiscardAndPrefetchBatchAsync(dptrs, sizes, count, locs, loc_idxs, nlocs,
                                                   0, stream);
    return cudaMemPrefetchBatchAsync(dptrs, sizes, count, locs, loc_idxs, nlocs, 0, stream);
#else
    (void)dptrs; (void)sizes; (void)count; (void)locs; (void)loc_idxs; (void)nlocs;
    (void)discard; (void)stream;
    return cudaErrorNotSupported;
#endif
}
static inline cudaError_t streams_cudaMemDiscardBatchAsync(void **dptrs, size_t *sizes,
                                                           size_t count, cudaStream_t stream) {
#if STREAMS_HAVE_MEM_BATCH
    return cudaMemDiscardBatchAsync(dptrs, sizes, count, 0, stream);
#else
    (void)dptrs; (void)sizes; (void)count; (void)stream;
    return cudaErrorNotSupported;
#endif
}

/* A driver entry point through the runtime, so that the package never
 * links libcuda: cudaGetDriverEntryPointByVersion from CUDA 12.5 (asking
 * for the CUDA 12.0 ABI of the symbol), cudaGetDriverEntryPoint before. */
static inline cudaError_t streams_get_driver_entry(const char *symbol, void **fn) {
    enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
    cudaError_t err;
    *fn = NULL;
#if CUDART_VERSION >= 12050
    err = cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &status);
#else
    err = cudaGetDriverEntryPoint(symbol, fn, cudaEnableDefault, &status);
#endif
    if (err == cudaSuccess && (status != cudaDriverEntryPointSuccess || *fn == NULL)) {
        *fn = NULL;
        return cudaErrorNotSupported;
    }
    return err;
}

/* A driver entry point at the ABI of CUDA `version` (a later ABI than the
 * 12.0 one streams_get_driver_entry asks for: the host function with a sync
 * mode is cuLaunchHostFunc at 13010).  Needs cudaGetDriverEntryPointByVersion
 * (CUDA 12.5); before it, cudaErrorNotSupported.  A driver older than
 * `version` answers with a status other than success: cudaErrorNotSupported
 * too. */
static inline cudaError_t streams_get_driver_entry_at(const char *symbol, void **fn,
                                                      unsigned int version) {
    *fn = NULL;
#if CUDART_VERSION >= 12050
    enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
    cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, fn, version, cudaEnableDefault,
                                                       &status);
    if (err == cudaSuccess && (status != cudaDriverEntryPointSuccess || *fn == NULL)) {
        *fn = NULL;
        return cudaErrorNotSupported;
    }
    return err;
#else
    (void)symbol; (void)version;
    return cudaErrorNotSupported;
#endif
}

/* cuLaunchHostFunc at the CUDA 13.1 ABI (cudaTypedefs.h:
 * PFN_cuLaunchHostFunc_v13010): with a sync mode, 0 blocking (what
 * cudaLaunchHostFunc does), 1 spin-wait. */
#define STREAMS_HOST_FN_SYNC_VERSION 13010
typedef int (*streams_launch_host_func_v2_fn)(cudaStream_t stream, cudaHostFn_t fn,
                                               void *data, unsigned int sync_mode);

/* The driver's stream memory operations (cuStreamWaitValue32/64 and
 * cuStreamWriteValue32/64, the _v2 ABI CUDA 12 resolves these names to),
 * declared here so that no driver header is needed.  CUresult and
 * cudaError_t share their codes for the errors these calls return. */
typedef int (*streams_stream_value32_fn)(cudaStream_t stream, unsigned long long addr,
                                          unsigned int value, unsigned int flags);
typedef int (*streams_stream_value64_fn)(cudaStream_t stream, unsigned long long addr,
                                          unsigned long long value, unsigned int flags);

#endif /* STREAMS_CUDA_VERSIONS_H */

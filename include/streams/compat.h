/* One spelling of the capture and graph-topology functions for CUDA 12 and
 * CUDA 13.  CUDA 12.3 added edge data as `_v3`/`_v2` variants; CUDA 13 folded
 * those into the base names and removed the old forms.  The package calls
 * only the streams_* names below, so the same source builds against both. */
#ifndef STREAMS_COMPAT_H
#define STREAMS_COMPAT_H

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

#endif /* STREAMS_COMPAT_H */

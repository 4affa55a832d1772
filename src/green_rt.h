/* Green contexts through the runtime's own API (CUDA 13.1: cudaGreenCtxCreate
 * and the execution-context calls), where this build's runtime has it.
 * Included by streams/_cudart.pyx only (the call layer).  Elsewhere each
 * wrapper answers cudaErrorNotSupported and the driver's entry points serve
 * (streams/_cudart/green.pxi, green_require). */
#ifndef STREAMS_GREEN_RT_H
#define STREAMS_GREEN_RT_H

#include <cuda_runtime_api.h>

#include "green.h"

#define STREAMS_HAVE_RUNTIME_GREEN (CUDART_VERSION >= 13010)
#define STREAMS_RUNTIME_GREEN_VERSION 13010

#if STREAMS_HAVE_RUNTIME_GREEN
/* cudaDevResource is the driver's CUdevResource: one layout for both APIs. */
typedef char streams_rt_resource_check[sizeof(cudaDevResource) == sizeof(streams_dev_resource)
                                       ? 1 : -1];

static inline cudaError_t streams_rt_device_sm_resource(int dev, streams_dev_resource *out) {
    return cudaDeviceGetDevResource(dev, (cudaDevResource *)out, cudaDevResourceTypeSm);
}

static inline cudaError_t streams_rt_sm_split(streams_dev_resource *result, unsigned int *groups,
                                              const streams_dev_resource *input,
                                              streams_dev_resource *remaining,
                                              unsigned int min_count) {
    return cudaDevSmResourceSplitByCount((cudaDevResource *)result, groups,
                                         (const cudaDevResource *)input,
                                         (cudaDevResource *)remaining, 0, min_count);
}

static inline cudaError_t streams_rt_green_create(streams_green_ctx *out,
                                                  streams_dev_resource *resource, int dev) {
    cudaDevResourceDesc_t desc = NULL;
    cudaError_t err = cudaDevResourceGenerateDesc(&desc, (cudaDevResource *)resource, 1);
    if (err != cudaSuccess)
        return err;
    return cudaGreenCtxCreate((cudaExecutionContext_t *)out, desc, dev, 0);
}

static inline cudaError_t streams_rt_green_destroy(streams_green_ctx ctx) {
    return cudaExecutionCtxDestroy((cudaExecutionContext_t)ctx);
}

static inline cudaError_t streams_rt_green_stream_create(cudaStream_t *out, streams_green_ctx ctx,
                                                         int priority) {
    return cudaExecutionCtxStreamCreate(out, (cudaExecutionContext_t)ctx, cudaStreamNonBlocking,
                                        priority);
}

static inline cudaError_t streams_rt_green_sm_resource(streams_green_ctx ctx,
                                                       streams_dev_resource *out) {
    return cudaExecutionCtxGetDevResource((cudaExecutionContext_t)ctx, (cudaDevResource *)out,
                                          cudaDevResourceTypeSm);
}

static inline cudaError_t streams_rt_green_record_event(streams_green_ctx ctx, cudaEvent_t ev) {
    return cudaExecutionCtxRecordEvent((cudaExecutionContext_t)ctx, ev);
}
#else
static inline cudaError_t streams_rt_device_sm_resource(int dev, streams_dev_resource *out) {
    (void)dev; (void)out;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_sm_split(streams_dev_resource *result, unsigned int *groups,
                                              const streams_dev_resource *input,
                                              streams_dev_resource *remaining,
                                              unsigned int min_count) {
    (void)result; (void)groups; (void)input; (void)remaining; (void)min_count;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_green_create(streams_green_ctx *out,
                                                  streams_dev_resource *resource, int dev) {
    (void)out; (void)resource; (void)dev;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_green_destroy(streams_green_ctx ctx) {
    (void)ctx;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_green_stream_create(cudaStream_t *out, streams_green_ctx ctx,
                                                         int priority) {
    (void)out; (void)ctx; (void)priority;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_green_sm_resource(streams_green_ctx ctx,
                                                       streams_dev_resource *out) {
    (void)ctx; (void)out;
    return cudaErrorNotSupported;
}
static inline cudaError_t streams_rt_green_record_event(streams_green_ctx ctx, cudaEvent_t ev) {
    (void)ctx; (void)ev;
    return cudaErrorNotSupported;
}
#endif

#endif /* STREAMS_GREEN_RT_H */

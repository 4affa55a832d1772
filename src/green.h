/* The driver's green-context API (spatial partitions of a device's SMs),
 * reached through the runtime's driver entry points, declared here so that
 * no driver header is needed.  Included by streams/_cudart.pxd only for the
 * types; the calls are made in streams/_cudart.pyx. */
#ifndef STREAMS_GREEN_H
#define STREAMS_GREEN_H

#include <stddef.h>

/* CUdevResource.  It is 144 bytes in every CUDA since 12.4: the type, 92
 * bytes of padding, then the SM part at byte 96 (CUDA 12: a 48-byte union
 * whose first field is smCount; CUDA 13: a 40-byte union of smCount,
 * minSmPartitionSize, smCoscheduledAlignment, flags, localityDomainId, then
 * the `nextResource` pointer).  A CUDA 12 driver fills only smCount; the
 * fields after it then read 0. */
typedef struct {
    int type;
    unsigned char internal_padding[92];
    unsigned int sm_count;
    unsigned int min_partition_size;
    unsigned int coscheduled_alignment;
    unsigned int flags;
    unsigned char sm_rest[24];
    void *next;
} streams_dev_resource;

typedef char streams_dev_resource_size_check[sizeof(streams_dev_resource) == 144 ? 1 : -1];
typedef char streams_dev_resource_sm_check[
    offsetof(streams_dev_resource, sm_count) == 96 ? 1 : -1];

#define STREAMS_DEV_RESOURCE_TYPE_SM 1
#define STREAMS_GREEN_CTX_DEFAULT_STREAM 0x1
#define STREAMS_STREAM_NON_BLOCKING 0x1
/* The driver ABI the entry points are asked for: cuGreenCtxStreamCreate
 * came with CUDA 12.5, the rest with 12.4. */
#define STREAMS_GREEN_VERSION 12050
/* cuStreamGetDevResource: CUDA 13.1. */
#define STREAMS_STREAM_RESOURCE_VERSION 13010

typedef void *streams_green_ctx;
typedef void *streams_resource_desc;

typedef int (*streams_device_get_dev_resource_fn)(int dev, streams_dev_resource *out, int type);
typedef int (*streams_sm_split_fn)(streams_dev_resource *result, unsigned int *groups,
                                   const streams_dev_resource *input,
                                   streams_dev_resource *remaining, unsigned int flags,
                                   unsigned int min_count);
typedef int (*streams_generate_desc_fn)(streams_resource_desc *out,
                                        streams_dev_resource *resources, unsigned int n);
typedef int (*streams_green_create_fn)(streams_green_ctx *out, streams_resource_desc desc,
                                       int dev, unsigned int flags);
typedef int (*streams_green_destroy_fn)(streams_green_ctx ctx);
typedef int (*streams_green_stream_create_fn)(void **stream, streams_green_ctx ctx,
                                              unsigned int flags, int priority);
typedef int (*streams_green_get_resource_fn)(streams_green_ctx ctx, streams_dev_resource *out,
                                             int type);
typedef int (*streams_stream_get_green_fn)(void *stream, streams_green_ctx *out);
typedef int (*streams_green_record_event_fn)(streams_green_ctx ctx, void *event);
typedef int (*streams_stream_get_resource_fn)(void *stream, streams_dev_resource *out, int type);

#endif /* STREAMS_GREEN_H */

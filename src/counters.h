/* What debug_counters() counts: handles made and released, callback
 * payloads, and, in a debug build (STREAMS_DEBUG_REFCOUNTS=1 when
 * building), every reference the C paths take or drop on a payload or a
 * DLPack export and every allocation and module.  The counters themselves
 * live in streams._cudart (src/cudart/counting.h); this header only names them, so that
 * every module can count through _cudart. */
#ifndef STREAMS_COUNTERS_H
#define STREAMS_COUNTERS_H

enum {
    STREAMS_CNT_STREAM_CREATED, STREAMS_CNT_STREAM_DESTROYED,
    STREAMS_CNT_EVENT_CREATED, STREAMS_CNT_EVENT_DESTROYED,
    STREAMS_CNT_GRAPH_CREATED, STREAMS_CNT_GRAPH_DESTROYED,
    STREAMS_CNT_EXEC_CREATED, STREAMS_CNT_EXEC_DESTROYED,
    STREAMS_CNT_MODULE_CREATED, STREAMS_CNT_MODULE_DESTROYED,
    STREAMS_CNT_BUFFER_CREATED, STREAMS_CNT_BUFFER_FREED,
    STREAMS_CNT_HOST_CALL_CREATED, STREAMS_CNT_HOST_CALL_FREED,
    STREAMS_CNT_CALLBACK_ENQUEUED, STREAMS_CNT_CALLBACK_COMPLETED,
    STREAMS_CNT_CALLBACK_DROPPED, STREAMS_CNT_GRAPH_CALLBACK_RUNS,
    STREAMS_CNT_DEFERRED_RELEASES,
    STREAMS_CNT_MEMPOOL_CREATED, STREAMS_CNT_MEMPOOL_DESTROYED,
    STREAMS_CNT_MARKER_CREATED,  /* per-thread marker events (kept for the thread's life) */
    STREAMS_CNT_GRAPH_ABANDONED, /* never destroyed: the driver corrupted it (_graph/capture.pxi) */
    /* native host functions enqueued with an owner to keep, and run */
    STREAMS_CNT_NATIVE_CALL_ENQUEUED, STREAMS_CNT_NATIVE_CALL_DONE,
    STREAMS_CNT_GREEN_CTX_CREATED, STREAMS_CNT_GREEN_CTX_DESTROYED,
    STREAMS_CNT_SEMAPHORE_CREATED, STREAMS_CNT_SEMAPHORE_DESTROYED,
    /* debug build only from here */
    STREAMS_CNT_PAYLOAD_INCREF, STREAMS_CNT_PAYLOAD_DECREF,
    STREAMS_CNT_DLPACK_INCREF, STREAMS_CNT_DLPACK_DECREF,
    STREAMS_CNT_MEMORY_ALLOC, STREAMS_CNT_MEMORY_FREE,
    STREAMS_CNT_MODULE_LOAD, STREAMS_CNT_MODULE_UNLOAD,
    STREAMS_CNT_PAYLOAD_LEAKED,  /* let go on purpose at shutdown or on ENOMEM */
    STREAMS_CNT_CUDA_WITH_GIL,   /* CUDA calls made holding the GIL: the rule says none */
    STREAMS_CNT_N
};
#define STREAMS_CNT_FIRST_DEBUG STREAMS_CNT_PAYLOAD_INCREF

/* The most devices the package tracks per device (the shim's markers and
 * sync threads, streams._device's priority cache): here because this is
 * the header every module sees through _cudart.pxd. */
#define STREAMS_MAX_DEVICES 64

#endif /* STREAMS_COUNTERS_H */

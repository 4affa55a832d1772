/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the per-thread marker events. */
#ifndef STREAMS_CUDART_MARKERS_H
#define STREAMS_CUDART_MARKERS_H

/* ---- Per-thread marker events -------------------------------------------
 * "Make stream A wait for what stream B has so far" records an event on B
 * and waits on it from A.  One event a thread and device serves every such
 * wait: cudaStreamWaitEvent takes the event's state at call time, so its
 * next record cannot disturb an earlier wait; and being per thread, two
 * threads cannot record each other's per-thread default stream into it. */
static pthread_key_t streams_marker_key;
static pthread_once_t streams_marker_once = PTHREAD_ONCE_INIT;

static void streams_free_markers(void *p) {
    cudaEvent_t *markers = (cudaEvent_t *)p;
    int i;
    if (markers == NULL)
        return;
    if (streams_guard_state() == 0 && !streams_is_shutting_down()) {
        for (i = 0; i < STREAMS_MAX_DEVICES; i++)
            streams_destroy_marker_event(markers[i]);
    }
    free(markers);
}

static void streams_marker_key_init(void) {
    pthread_key_create(&streams_marker_key, streams_free_markers);
}

/* The calling thread's marker event on device `dev` (made on first use). */
static cudaError_t streams_thread_marker(int dev, cudaEvent_t *out) {
    streams_gil_rule("streams_thread_marker");
    cudaEvent_t *markers;
    cudaError_t err = cudaSuccess;
    int cur = -1;
    if (dev < 0 || dev >= STREAMS_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_once(&streams_marker_once, streams_marker_key_init);
    markers = (cudaEvent_t *)pthread_getspecific(streams_marker_key);
    if (markers == NULL) {
        markers = (cudaEvent_t *)calloc(STREAMS_MAX_DEVICES, sizeof(cudaEvent_t));
        if (markers == NULL)
            return cudaErrorMemoryAllocation;
        pthread_setspecific(streams_marker_key, markers);
    }
    if (markers[dev] == NULL) {
        err = cudaGetDevice(&cur);
        if (err == cudaSuccess && cur != dev)
            err = cudaSetDevice(dev);
        if (err == cudaSuccess)
            err = cudaEventCreateWithFlags(&markers[dev], cudaEventDisableTiming);
        if (err == cudaSuccess)
            streams_count(STREAMS_CNT_MARKER_CREATED);
        if (cur >= 0 && cur != dev)
            cudaSetDevice(cur);
        if (err != cudaSuccess) {
            markers[dev] = NULL;
            return err;
        }
    }
    *out = markers[dev];
    return cudaSuccess;
}

#endif /* STREAMS_CUDART_MARKERS_H */

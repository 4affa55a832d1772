/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): failed releases made by the shim itself. */
#ifndef STREAMS_CUDART_CLEANUP_H
#define STREAMS_CUDART_CLEANUP_H

/* ---- Releases the shim makes ------------------------------------------------
 * The shim destroys events of its own (the per-thread marker events, the
 * marks of graph launches) where nothing can be raised: a thread's exit, an
 * executable let go.  A failure is reported as every other failed release
 * is, as a streams.CudaWarning: the call layer (streams/_cudart.pyx) hands
 * over its queue of failures (cleanup_failed) and its fault injection
 * (injected_failure, for tests) at import.  Both take no GIL. */
typedef void (*streams_cleanup_failed_fn)(int what, const void *handle, int err);
typedef int (*streams_injected_failure_fn)(int what);
static streams_cleanup_failed_fn streams_cleanup_failed_hook = NULL;
static streams_injected_failure_fn streams_injected_failure_hook = NULL;
static int streams_cleanup_marker_kind = -1;

static void streams_set_cleanup_hooks(streams_cleanup_failed_fn failed,
                                      streams_injected_failure_fn injected, int marker_kind) {
    streams_cleanup_failed_hook = failed;
    streams_injected_failure_hook = injected;
    streams_cleanup_marker_kind = marker_kind;
}

/* Any thread, no GIL: destroy one of the shim's own events; a failure is
 * queued for the next flush (the injected error, if a test asked for one,
 * after the real destroy, so nothing leaks). */
static void streams_destroy_marker_event(cudaEvent_t ev) {
    int injected = 0;
    cudaError_t err;
    if (ev == NULL)
        return;
    if (streams_injected_failure_hook != NULL && streams_cleanup_marker_kind >= 0)
        injected = streams_injected_failure_hook(streams_cleanup_marker_kind);
    err = cudaEventDestroy(ev);
    if (err != cudaSuccess)
        cudaGetLastError();  /* must not leak into this thread's next call */
    if (injected)
        err = (cudaError_t)injected;
    if (err != cudaSuccess && streams_cleanup_failed_hook != NULL)
        streams_cleanup_failed_hook(streams_cleanup_marker_kind, (const void *)ev, (int)err);
}

#endif /* STREAMS_CUDART_CLEANUP_H */

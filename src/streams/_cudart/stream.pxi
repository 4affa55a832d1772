# Stream management, and stream capture: part of streams._cudart
# (_cudart.pyx includes it).

cdef int stream_create(cudaStream_t* out, unsigned int flags, int priority,
                       bint default_priority) except -1 nogil:
    cdef cudaError_t err
    guard()
    # The plainest call that expresses the request (all three end in the
    # same driver call; this keeps each one reachable).
    if default_priority and flags == cudaStreamDefault:
        err = cudaStreamCreate(out)
    elif default_priority:
        err = cudaStreamCreateWithFlags(out, flags)
    else:
        err = cudaStreamCreateWithPriority(out, flags, priority)
    check(err)
    streams_count(STREAMS_CNT_STREAM_CREATED)
    return 0


cdef int stream_query(cudaStream_t h) except -1 nogil:
    cdef cudaError_t err
    _guard_fast()
    err = cudaStreamQuery(h)
    if err == cudaSuccess:
        return 1
    if err == cudaErrorNotReady:
        return 0
    return check(err)


cdef int stream_synchronize(cudaStream_t h) except -1 nogil:
    _guard_fast()
    return check(cudaStreamSynchronize(h))


cdef int stream_wait_event(cudaStream_t h, cudaEvent_t ev, unsigned int flags) except -1 nogil:
    _guard_fast()
    return check(cudaStreamWaitEvent(h, ev, flags))


cdef int stream_wait_stream(cudaStream_t waiter, cudaStream_t other,
                            int other_device) except -1 nogil:
    cdef cudaEvent_t marker = NULL
    guard()
    check(streams_thread_marker(other_device, &marker))
    check(cudaEventRecord(marker, other))
    return check(cudaStreamWaitEvent(waiter, marker, 0))


cdef int stream_get_priority(cudaStream_t h, int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetPriority(h, out))


cdef int stream_get_flags(cudaStream_t h, unsigned int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetFlags(h, out))


cdef int stream_get_id(cudaStream_t h, unsigned long long* out) except -1 nogil:
    guard()
    return check(cudaStreamGetId(h, out))


cdef int stream_get_device(cudaStream_t h, int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetDevice(h, out))


cdef int stream_get_attribute(cudaStream_t h, cudaStreamAttrID attr,
                              cudaStreamAttrValue* out) except -1 nogil:
    guard()
    return check(cudaStreamGetAttribute(h, attr, out))


cdef int stream_set_attribute(cudaStream_t h, cudaStreamAttrID attr,
                              const cudaStreamAttrValue* value) except -1 nogil:
    guard()
    return check(cudaStreamSetAttribute(h, attr, value))


cdef int stream_copy_attributes(cudaStream_t dst, cudaStream_t src) except -1 nogil:
    guard()
    return check(cudaStreamCopyAttributes(dst, src))


cdef int stream_attach_mem_async(cudaStream_t h, void* p, size_t length,
                                 unsigned int flags) except -1 nogil:
    guard()
    return check(cudaStreamAttachMemAsync(h, p, length, flags))


# ---- capture ----------------------------------------------------------------------------

# Captures begin and end inside a write hold of their stream's capture
# fence and the capture lock (src/cudart/fence.h): never in the middle of an
# enqueue on that stream that checked whether it captures, nor of an
# enqueue into a capture.  Called without the GIL.

cdef int stream_begin_capture(cudaStream_t h, cudaStreamCaptureMode mode) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamBeginCapture(h, mode)
    streams_fence_open(<void*>h)
    return check(err)


cdef int stream_begin_capture_to_graph(cudaStream_t h, cudaGraph_t g,
                                       const cudaGraphNode_t* deps, size_t n,
                                       cudaStreamCaptureMode mode) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamBeginCaptureToGraph(h, g, deps, NULL, n, mode)
    streams_fence_open(<void*>h)
    return check(err)


cdef int stream_end_capture(cudaStream_t h, cudaGraph_t* out) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamEndCapture(h, out)
    streams_fence_open(<void*>h)
    return check(err)


cdef int fence_enter(cudaStream_t h) except -1 nogil:
    guard()
    streams_fence_enter(<void*>h)
    return 0


cdef bint fence_try_enter(cudaStream_t h) except -1 nogil:
    # 1: a read hold taken (fence_leave ends it); 0: a capture begins or
    # ends on the stream now, and nothing was taken.
    guard()
    return streams_fence_try_enter(<void*>h) == 1


cdef void fence_leave(cudaStream_t h) noexcept nogil:
    streams_fence_leave(<void*>h)


cdef int capture_lock_enter() except -1 nogil:
    guard()
    streams_capture_enter()
    return 0


cdef void capture_lock_leave() noexcept nogil:
    streams_capture_leave()


cdef size_t fence_streams_now() noexcept nogil:
    return streams_fence_streams_now()


cdef bint stream_in_capture(cudaStream_t h) noexcept nogil:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef cudaError_t err
    if streams_gil_held_here():
        _note_cuda_with_gil()
    err = cudaStreamIsCapturing(h, &status)
    if err != cudaSuccess:
        cudaGetLastError()
        # Only the legacy stream's "cannot say while a blocking stream is
        # captured" passes: any other error (a handle CUDA no longer knows)
        # would not, and a free retried on it at every drain would hand the
        # driver that handle again and again; the free then reports its own
        # error instead.
        return err == cudaErrorStreamCaptureImplicit
    return status != cudaStreamCaptureStatusNone


cdef int stream_is_capturing(cudaStream_t h, cudaStreamCaptureStatus* out) except -1 nogil:
    guard()
    return check(cudaStreamIsCapturing(h, out))


cdef int stream_get_capture_info(cudaStream_t h, cudaStreamCaptureStatus* status,
                                 unsigned long long* cid, cudaGraph_t* graph,
                                 const cudaGraphNode_t** deps,
                                 const cudaGraphEdgeData** edges, size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaStreamGetCaptureInfo(h, status, cid, graph, deps, edges, n))


cdef int stream_capture_state_locked(cudaStream_t h, cudaStreamCaptureStatus* status,
                                     unsigned long long* cid) except -1 nogil:
    # Under the capture lock (src/cudart/fence.h): no capture begins or
    # ends meanwhile, on this stream or on the capture it may have joined
    # (an end takes every joined stream out of it); for callers inside the
    # stream's read fence, which covers this stream's own begin and end.
    cdef cudaError_t err
    guard()
    streams_capture_enter()
    err = streams_cudaStreamGetCaptureInfo(h, status, cid, NULL, NULL, NULL, NULL)
    streams_capture_leave()
    return check(err)


cdef int stream_update_capture_dependencies(cudaStream_t h, cudaGraphNode_t* deps, size_t n,
                                            unsigned int flags) except -1 nogil:
    guard()
    return check(streams_cudaStreamUpdateCaptureDependencies(h, deps, NULL, n, flags))


cdef int thread_exchange_capture_mode(cudaStreamCaptureMode* mode) except -1 nogil:
    guard()
    return check(cudaThreadExchangeStreamCaptureMode(mode))

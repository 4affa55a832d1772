# Event management, part of streams._cudart (_cudart.pyx includes it).

cdef int event_create(cudaEvent_t* out, unsigned int flags) except -1 nogil:
    guard()
    check(cudaEventCreateWithFlags(out, flags))
    streams_count(STREAMS_CNT_EVENT_CREATED)
    return 0


cdef int event_record(cudaEvent_t ev, cudaStream_t s, unsigned int flags) except -1 nogil:
    _guard_fast()
    if flags == cudaEventRecordDefault:
        return check(cudaEventRecord(ev, s))
    return check(cudaEventRecordWithFlags(ev, s, flags))


cdef int event_query(cudaEvent_t h) except -1 nogil:
    cdef cudaError_t err
    _guard_fast()
    err = cudaEventQuery(h)
    if err == cudaSuccess:
        return 1
    if err == cudaErrorNotReady:
        return 0
    return check(err)


cdef int event_synchronize(cudaEvent_t h) except -1 nogil:
    _guard_fast()
    return check(cudaEventSynchronize(h))


cdef int event_elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end) except -1 nogil:
    guard()
    return check(cudaEventElapsedTime(ms, start, end))


cdef int ipc_get_event_handle(cudaIpcEventHandle_t* out, cudaEvent_t h) except -1 nogil:
    guard()
    return check(cudaIpcGetEventHandle(out, h))


cdef int ipc_open_event_handle(cudaEvent_t* out, cudaIpcEventHandle_t handle) except -1 nogil:
    guard()
    check(cudaIpcOpenEventHandle(out, handle))
    streams_count(STREAMS_CNT_EVENT_CREATED)
    return 0

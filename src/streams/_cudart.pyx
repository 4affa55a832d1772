# cython: language_level=3
"""The one owner of the CUDA runtime in streams.

This is the only extension of the package that links ``libcudart_static.a``
and the C shim (src/cudart/shim.h): one runtime per process.  Every
other module calls CUDA through the thin ``nogil`` wrappers declared in
``_cudart.pxd``, each of which refuses the call where CUDA forbids it (inside
a host callback, in a forked child) and turns a failure into ``CudaError``,
so that no call site can forget either.  Releases of handles (``release_*``)
never raise and are deferred to a safe thread when they cannot run now.

The wrappers follow the chapters of the CUDA runtime API reference (device,
stream and capture, event, execution, memory, stream-ordered allocator, peer
access, graph, library), after the package's machinery they are written in
(errors, the guard, counters, deferred releases); ``_cudart.pxd`` declares
them in the same order.  Green contexts, kernel nodes and adopted kernels
through the driver follow, then cleanup warnings, the in-process floor of
the benchmarks and the private hooks of the tests.  Each is a part of its
own (``_cudart/*.pxi``), included below in that order: the text is cut by
concept, the module stays one translation unit (one static cudart, one copy
of the shim's state).
"""
cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from posix.mman cimport munmap

from streams._platform cimport (STREAMS_FREE_THREADED, streams_flag_get, streams_flag_set,
                                streams_ptr_load, streams_ptr_store, streams_sleep_ns)
from streams.cudart cimport *

cdef extern from "cudart/shim.h" nogil:
    enum:
        STREAMS_GUARD_OK
        STREAMS_GUARD_IN_CALLBACK
        STREAMS_GUARD_FORKED
    int streams_guard_state()
    int streams_cuda_touched
    int streams_install_fork_handler()
    void streams_mark_shutting_down()
    void streams_clear_shutting_down()
    int streams_interpreter_alive()
    int streams_wait_trampolines_idle(long long timeout_ns)
    long long streams_now_ns()
    void streams_count(int which)
    unsigned long long streams_counter(int which)
    int streams_debug_build()
    int streams_gil_held_here()
    const char* streams_gil_c_site(int i)
    void streams_note_async_free()
    unsigned long long streams_async_frees_so_far()

    ctypedef void (*streams_release_fn)(void* arg, int kind) noexcept nogil
    int streams_defer(streams_release_fn fn, void* arg, int kind, PyObject* keep)
    int streams_defer_ex(streams_release_fn fn, void* arg, int kind, PyObject* keep, int wake)
    void streams_release_without_gil(streams_release_fn fn, void* arg, int kind)

    void streams_host_fn_trampoline(void* payload)
    void streams_producer_enter()
    void streams_producer_leave()
    int streams_producers_yield
    void streams_stream_callback_trampoline(cudaStream_t stream, cudaError_t status,
                                            void* payload)
    void streams_graph_host_fn_trampoline(void* payload)
    int streams_call_on_native_thread(void* payload, int count)
    void streams_user_object_release(void* payload)
    void streams_notify_ticket_fn(void* ticket)
    void streams_fence_enter(void* stream)
    int streams_fence_try_enter(void* stream)
    void streams_fence_leave(void* stream)
    void streams_fence_close(void* stream)
    void streams_fence_open(void* stream)
    void streams_capture_enter()
    void streams_capture_leave()
    size_t streams_fence_streams_now()
    unsigned long long streams_ticket_new(void* payload)
    void* streams_ticket_take(unsigned long long token)
    long long streams_tickets_pending_now()
    unsigned long long streams_tickets_stale_calls()

    ctypedef void (*streams_host_fn_t)(void* data) noexcept nogil
    ctypedef struct streams_native_call:
        pass
    streams_native_call* streams_native_call_new(streams_host_fn_t fn, void* data,
                                                 PyObject* keep)
    void streams_native_host_fn_trampoline(void* ticket)
    void streams_testing_native_increment(void* data)

    cudaError_t streams_thread_marker(int dev, cudaEvent_t* out)
    unsigned long long streams_devsync_request(int dev, cudaError_t* err)
    int streams_devsync_wait(int dev, unsigned long long ticket, long long slice_ns,
                             cudaError_t* err, long long* in_flight_ns)

cdef extern from "cudart/shim.h":
    Py_ssize_t streams_drain_deferred()
    ctypedef void (*streams_cleanup_failed_fn)(int what, const void* handle, int err) noexcept nogil
    ctypedef int (*streams_injected_failure_fn)(int what) noexcept nogil
    void streams_set_cleanup_hooks(streams_cleanup_failed_fn failed,
                                   streams_injected_failure_fn injected, int marker_kind)
    ctypedef struct streams_marks_t:
        pass
    streams_marks_t* streams_marks_new() nogil
    cudaError_t streams_marks_record(streams_marks_t* m, cudaStream_t stream) nogil
    int streams_marks_done(streams_marks_t* m) nogil
    void streams_marks_free(streams_marks_t* m) nogil
    int streams_park(streams_marks_t* m, PyObject* a, PyObject* b)
    int streams_park_release(streams_marks_t* m, streams_release_fn fn, void* arg, int kind)
    int streams_marks_push(streams_marks_t* m, cudaEvent_t ev) nogil
    void streams_destroy_marker_event(cudaEvent_t ev) nogil
    size_t streams_parked_count()
    Py_ssize_t streams_poll_parked()
    void streams_payload_incref(PyObject* payload)
    void streams_payload_decref(PyObject* payload)
    ctypedef void (*streams_dispatch_fn)(PyObject* payload, int status) noexcept
    streams_dispatch_fn streams_dispatch

cdef extern from "cuda_versions.h" nogil:
    cudaError_t streams_cudaStreamGetCaptureInfo(
        cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
        unsigned long long* id_out, cudaGraph_t* graph_out,
        const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
        size_t* numDependencies_out)
    cudaError_t streams_cudaStreamUpdateCaptureDependencies(
        cudaStream_t stream, cudaGraphNode_t* dependencies,
        const cudaGraphEdgeData* dependencyData, size_t numDependencies, unsigned int flags)
    cudaError_t streams_cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from_,
                                          cudaGraphNode_t* to, cudaGraphEdgeData* edgeData,
                                          size_t* numEdges)
    cudaError_t streams_cudaGraphNodeGetDependencies(cudaGraphNode_t node,
                                                     cudaGraphNode_t* pDependencies,
                                                     cudaGraphEdgeData* edgeData,
                                                     size_t* pNumDependencies)
    cudaError_t streams_cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset,
                                             size_t* size)
    cudaError_t streams_cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const cudaGraphNode_t* deps, size_t n,
                                         cudaGraphNodeParams* params)
    bint STREAMS_HAVE_MEMCPY_BATCH
    bint STREAMS_HAVE_MEM_BATCH
    cudaError_t streams_cudaMemPrefetchAsync(const void* p, size_t n, cudaMemLocation location,
                                             unsigned int flags, cudaStream_t stream)
    cudaError_t streams_cudaMemAdvise(const void* p, size_t n, int advice,
                                      cudaMemLocation location)
    cudaError_t streams_cudaMemPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                  cudaMemLocation* locs, size_t* loc_idxs,
                                                  size_t nlocs, int discard, cudaStream_t stream)
    cudaError_t streams_cudaMemDiscardBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                 cudaStream_t stream)
    cudaError_t cudaMemRangeGetAttribute(void* data, size_t data_size, int attribute,
                                         const void* p, size_t n)
    cudaError_t streams_cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes,
                                             size_t count, cudaStream_t stream)
    cudaError_t streams_get_driver_entry(const char* symbol, void** fn)
    cudaError_t streams_get_driver_entry_at(const char* symbol, void** fn, unsigned int version)
    int STREAMS_HOST_FN_SYNC_VERSION
    ctypedef int (*streams_launch_host_func_v2_fn)(cudaStream_t stream, cudaHostFn_t fn,
                                                   void* data, unsigned int sync_mode)
    ctypedef int (*streams_stream_value32_fn)(cudaStream_t stream, unsigned long long addr,
                                              unsigned int value, unsigned int flags)
    ctypedef int (*streams_stream_value64_fn)(cudaStream_t stream, unsigned long long addr,
                                              unsigned long long value, unsigned int flags)

cdef extern from "notify.h" nogil:
    void streams_notify_host_fn(void* node)

# Declared here, not cimported: cpython.pystate declares it without nogil,
# and the call layer's guard calls it from nogil code.
cdef extern from "Python.h" nogil:
    int PyGILState_Check()


include "_cudart/machinery.pxi"
include "_cudart/device.pxi"
include "_cudart/stream.pxi"
include "_cudart/event.pxi"
include "_cudart/execution.pxi"
include "_cudart/memory.pxi"
include "_cudart/allocator.pxi"
include "_cudart/peer.pxi"
include "_cudart/graph.pxi"
include "_cudart/library.pxi"


# ---- module state -------------------------------------------------------------------------

# A module object can outlive one interpreter (an embedding application that
# finalizes Python and initializes it again): start each life open.
streams_clear_shutting_down()
if streams_install_fork_handler() != 0:
    raise ImportError("streams: pthread_atfork failed")


include "_cudart/green.pxi"
include "_cudart/kernel_nodes.pxi"
include "_cudart/adopted.pxi"
include "_cudart/cleanup.pxi"
# The floor of the benchmarks is in this translation unit, which links the
# static cudart that streams calls: a floor in another extension would have
# a cudart of its own.
include "_cudart/floor.pxi"
include "_cudart/_testing.pxi"

# Declarations of the C shim in include/streams/shim.h (threads and
# interpreter-lifetime concerns that must be written in C).

cdef extern from "streams/shim.h" nogil:
    int streams_guard_state()
    int streams_cuda_touched
    int streams_install_fork_handler()
    void streams_mark_shutting_down()
    int streams_is_shutting_down()
    int streams_wait_trampolines_idle(long long timeout_ns)
    long long streams_now_ns()
    void streams_cpu_yield()
    void streams_cpu_relax()
    void streams_sleep_ns(long long ns)
    int streams_py_finalizing()

    void streams_host_fn_trampoline(void* payload)
    void streams_stream_callback_trampoline(cudaStream_t stream, cudaError_t status,
                                            void* payload)
    void streams_graph_host_fn_trampoline(void* payload)
    void streams_user_object_release(void* payload)

cdef extern from "streams/shim.h":
    Py_ssize_t streams_drain_deferred()
    # Every reference a work item or user object holds on a payload goes
    # through these (counted in a debug build).
    void streams_payload_incref(PyObject* payload)
    void streams_payload_decref(PyObject* payload)

cdef extern from "streams/shim.h" nogil:
    # The debug build's counters (STREAMS_DEBUG_REFCOUNTS=1 when building);
    # in a normal build counting is a no-op and every value reads 0.
    enum:
        STREAMS_DBG_PAYLOAD_INCREF
        STREAMS_DBG_PAYLOAD_DECREF
        STREAMS_DBG_DLPACK_INCREF
        STREAMS_DBG_DLPACK_DECREF
        STREAMS_DBG_MEMORY_ALLOC
        STREAMS_DBG_MEMORY_FREE
        STREAMS_DBG_MODULE_LOAD
        STREAMS_DBG_MODULE_UNLOAD
        STREAMS_DBG_PAYLOAD_LEAKED
    void streams_dbg_count(int which)
    unsigned long long streams_dbg_value(int which)
    int streams_debug_build()

cdef extern from "streams/compat.h" nogil:
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

cdef extern from "streams/shim.h":
    # Called by the trampolines with the GIL held.
    ctypedef void (*streams_dispatch_fn)(PyObject* payload, int status) noexcept
    streams_dispatch_fn streams_dispatch

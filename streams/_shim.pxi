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
    int streams_py_finalizing()

    void streams_host_fn_trampoline(void* payload)
    void streams_stream_callback_trampoline(cudaStream_t stream, cudaError_t status,
                                            void* payload)
    void streams_graph_host_fn_trampoline(void* payload)

cdef extern from "streams/shim.h":
    # Called by the trampolines with the GIL held.
    ctypedef void (*streams_dispatch_fn)(PyObject* payload, int status) noexcept
    streams_dispatch_fn streams_dispatch

# NVTX from C (docs/nvtx.rst): ranges and marks that need no GIL, for the
# package's own modules and for projects that cimport streams
# (`from streams._nvtx cimport nvtx_range_push, nvtx_range_pop`).  Plain C
# types only: a cimporter compiles no NVTX or CUDA header.  Every call is a
# no-op costing a load and a branch when no NVTX tool is attached, and when
# streams was built without NVTX (streams.nvtx.available is False).

from libc.stdint cimport uint32_t

# A domain's handle (NULL: NVTX's default domain), made once per name and
# kept for the life of the process; `name` is a str or None.  Needs the GIL.
cdef void* nvtx_domain(object name) except? NULL
# A range on the calling thread: push returns its nesting level (0 for the
# outermost) or a negative number where no tool counts; pop ends the
# innermost range of `domain` on this thread.  `color`: 0 for none, else
# 0xAARRGGBB.  `message` is copied by the tool before push returns.
cdef int nvtx_range_push(void* domain, const char* message, uint32_t color) noexcept nogil
cdef int nvtx_range_pop(void* domain) noexcept nogil
cdef void nvtx_mark(void* domain, const char* message, uint32_t color) noexcept nogil

# NVTX names of CUDA resources (Stream.name, Event.name, streams.nvtx.name_device).
cdef void name_stream(void* stream, const char* name) noexcept nogil
cdef void name_event(void* event, const char* name) noexcept nogil

# Ranges around the package's own operations, in the "streams" domain, while
# streams.nvtx.trace_calls(True).  A caller keeps the switch's address
# (trace_switch(), at import) and tests it with streams_flag_get: one load
# and one branch while tracing is off.  trace_push and trace_pop pair on one
# thread, around the operation, its failure included (try/finally).
cdef enum TracedCall:
    CALL_STREAM_SYNCHRONIZE
    CALL_EVENT_SYNCHRONIZE
    CALL_RECORD
    CALL_WAIT_EVENT
    CALL_WAIT_STREAM
    CALL_LAUNCH
    CALL_HOST_FUNC
    CALL_MEMCPY
    CALL_MEMSET
    CALL_GRAPH_LAUNCH
    CALL_COUNT

cdef const int* trace_switch() noexcept nogil
cdef void trace_push(int call) noexcept nogil
cdef void trace_pop() noexcept nogil


# The race checker's switch (streams.checker): like trace_switch, read at
# import by each module with checked operations and tested with
# streams_flag_get; while on, each calls the checker's hooks (check_hooks(),
# a Python object set once before the switch first goes on, never replaced)
# with the GIL held: after the operation was enqueued, or for a buffer's
# free, as the free is made (or deferred).
cdef const int* check_switch() noexcept nogil
cdef object check_hooks()

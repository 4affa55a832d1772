# C-level declarations of graphs (streams._graph).  Free of CUDA types, as
# _stream.pxd: a project that cimports streams needs no CUDA headers.
from streams._handle cimport HandleOwner
from streams._stream cimport ErrorSlot, Event, Stream

cdef extern from "streams/streams.h":
    ctypedef void* streams_graph_t
    ctypedef void* streams_graph_exec_t


cdef class GraphNode


cdef class Graph(HandleOwner):
    cdef streams_graph_t _handle
    cdef ErrorSlot _errors       # shared with its clones' and executables' callbacks
    cdef list _keep              # what the graph's nodes need alive (buffers, modules, ...)

    cdef streams_graph_t c_handle(self) noexcept nogil
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    cdef GraphNode _add_event_node(self, Event ev, object dependencies, bint record)


cdef class GraphNode:
    cdef void* _handle           # cudaGraphNode_t
    cdef Graph _graph
    cdef int _check(self) except -1


cdef class GraphExec(HandleOwner):
    cdef streams_graph_exec_t _handle
    cdef ErrorSlot _errors
    cdef tuple _keep

    cdef int c_launch(self, Stream stream) except -1 nogil
    cdef int c_upload(self, Stream stream) except -1 nogil
    cdef streams_graph_exec_t c_handle(self) noexcept nogil
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil

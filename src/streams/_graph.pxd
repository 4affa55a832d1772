# C-level declarations of graphs (streams._graph).  Free of CUDA types, as
# _stream.pxd: a project that cimports streams needs no CUDA headers.
from libc.stdint cimport uintptr_t

from streams._handle cimport HandleOwner
from streams._stream cimport ErrorSlot, Event, Stream, streams_host_fn_t

cdef extern from "streams/streams.h":
    ctypedef void* streams_graph_t
    ctypedef void* streams_graph_exec_t


cdef class GraphNode


cdef class Graph(HandleOwner):
    cdef streams_graph_t _handle
    # Where its host callbacks report (a relay: shared with its clones, its
    # bodies and the capture that made it), passed on to the slot of each
    # executable that runs them (GraphExec._link_sources).
    cdef ErrorSlot _errors
    # The slots of the callbacks of the child graphs embedded in it (their
    # own, and those of their children), or None: its executables run them.
    # Kept by the top graph (a body's children are its top graph's), read and
    # replaced under its critical section.
    cdef tuple _child_errors
    # What the graph's nodes need alive (buffers, modules, ...): read and
    # replaced under the graph's critical section only (_keep_add, _keep_copy,
    # _let_go in _graph.pyx); let go when the handle is destroyed.
    cdef list _keep
    # A conditional node's body: the Graph (a reference, and a use) whose
    # node owns it; NULL for a graph of its own.
    cdef void* _parent
    # Weak references to the executables instantiated from it (None before
    # the first): a change of one of its kernel nodes is noted in each
    # first (GraphExec._note_source_state).
    cdef list _execs
    cdef bint _dying             # __dealloc__ began: _release touches no field
    # The graph of a capture in progress, as capture_info() made it (the
    # Graph end_capture will return): the capture's id, and the capture
    # holds it in use until it ends; 0 otherwise.  Changed under its
    # critical section (_capture_release).  Not its handle's owner until
    # end_capture adopts it.
    cdef unsigned long long _capture
    # Its keep list is owned by a CUDA user object of the capture's graph
    # too (_keep_ready): whoever ends the capture, what the nodes added
    # through capture_info need lives as long as CUDA's graph.
    cdef bint _keep_attached
    # Held (top graph) while a node's change is noted in the executables and
    # made, and while an executable is made and listed (_execs): a change
    # is noted in every executable that ran the node as it was before.
    cdef object _change_lock

    cdef streams_graph_t c_handle(self) noexcept nogil
    # A host node calling fn(data) on every replay, after the `ndeps` nodes
    # (cudaGraphNode_t) of `deps`; returns the cudaGraphNode_t.  The caller
    # keeps what fn and data need alive while the graph, its clones and
    # executables may run it.
    cdef void* c_add_host_node(self, streams_host_fn_t fn, void* data, void** deps,
                               size_t ndeps) except NULL nogil
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    cdef void _leave_parent(self) noexcept nogil
    cdef int _refuse_in_body(self, str what) except -1
    cdef GraphNode _add_event_node(self, Event ev, object dependencies, bint record)
    cdef tuple _add_conditional(self, object cond, int kind, unsigned int size,
                                object dependencies)
    cdef str _one_executable_only(self)


cdef class GraphNode:
    cdef void* _handle           # cudaGraphNode_t
    cdef Graph _graph
    cdef int _check(self) except -1


cdef class GraphExec(HandleOwner):
    cdef streams_graph_exec_t _handle
    # Its own slot, raised by its launch: the slots of the callbacks it runs
    # pass their errors on to it (_link_sources), and set_host_node's
    # callbacks report to it.
    cdef ErrorSlot _errors
    # The slots linked to _errors: those of the graph it runs (the one it was
    # instantiated or last updated from, and its child graphs'), and per node
    # those set_child_graph_node brought (node handle -> tuple); `_linked`
    # what is linked now.  Changed under _lock.
    cdef tuple _graph_sources
    cdef dict _node_sources
    cdef tuple _linked
    # A threading.RLock: a change of a node (read what it runs, make the
    # change, record it), an update and a relinking of error slots are
    # whole with respect to one another.  Never held by a critical section.
    cdef object _lock
    # What the replays use (the graph's keep-alives, and those of node
    # updates an unboxed executable keeps itself), in tuples the GC cannot
    # clear: (older, newer) pairs once updates add to it ("What graphs keep
    # alive" in docs/architecture.rst).
    cdef tuple _keep
    cdef list _box               # boxed: what node updates need, held by CUDA; else None
    cdef bint _boxed             # a CUDA user object owns _box (see Graph.instantiate)
    cdef void* _marks            # where its launches end, while it holds objects (rt.marks_new)
    cdef streams_graph_t _source # the graph it came from: its nodes name the executable's
    cdef object _source_ref      # a weak reference to that Graph: open, its handle is _source
    # What each kernel node runs now where that is not the source graph's
    # node (node handle -> _NodeState): after a change of its own, after an
    # update from another graph, before a change of the source graph's
    # node.  None when empty.
    cdef dict _kernel_state
    # A node without an entry runs what the source graph's node has now
    # (instantiated or updated from that graph); False after an update from
    # another graph: such a node is not known.
    cdef bint _states_from_source
    cdef bint _dying             # __dealloc__ began: _release touches no field

    cdef int c_launch(self, Stream stream) except -1 nogil
    cdef int c_upload(self, Stream stream) except -1 nogil
    # Enable or disable a node (a cudaGraphNode_t of the source graph).
    cdef int c_set_node_enabled(self, void* node, bint enabled) except -1 nogil
    cdef GraphNode _node_of(self, object node, str argname)
    cdef int _enter(self, GraphNode nd) except -1
    cdef void _leave(self, GraphNode nd) noexcept
    cdef int _set_event(self, object node, Event ev, bint record) except -1
    cdef object _state_of(self, GraphNode nd)
    cdef int _set_state(self, uintptr_t key, object st) except -1
    cdef int _note_source_state(self, uintptr_t key, object st) except -1
    cdef int _took(self, Graph graph, tuple kept, dict states, bint from_source,
                   list box, object pair, void** marks) except -1
    cdef int _link_sources(self) except -1
    cdef int _keep_for_replays(self, object obj) except -1
    cdef int _start_marks(self) except -1
    cdef void _park(self) noexcept
    cdef streams_graph_exec_t c_handle(self) noexcept nogil
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil


# An executable's repr while open (GraphExec.__repr__), also for the name a
# replay's deadline keeps of it (streams._deadline).
cdef str exec_name(uintptr_t handle)

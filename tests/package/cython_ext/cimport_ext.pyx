# cython: language_level=3, freethreading_compatible=True
# A downstream extension that cimports streams, as another project would.
# Built by tests/package/test_cimport.py with only streams.get_include() added to
# include_dirs: no CUDA headers, no cudart.  Every class with a C-level API
# is reached through `from streams cimport ...` and called without the GIL.
# It keeps no shared state of its own, so it declares that a free-threaded
# CPython may run it without the GIL (importing it leaves the GIL off).
from libc.stdint cimport uintptr_t

from streams cimport Event, Graph, GraphExec, Kernel, PreparedLaunch, Stream
from streams cimport nvtx_domain, nvtx_mark, nvtx_range_pop, nvtx_range_push

ctypedef fused StreamOrEvent:
    Stream
    Event


def handle_of(Stream s):
    return <uintptr_t>s.c_handle()


def device_of(Stream s):
    cdef int dev
    with nogil:
        dev = s.c_device()
    return dev


def query_nogil(StreamOrEvent obj):
    """obj.c_query() of a Stream or an Event (a fused function: anything else
    is a TypeError)."""
    cdef int done
    with nogil:
        done = obj.c_query()
    return done


def synchronize_nogil(Stream s):
    with nogil:
        s.c_synchronize()


def order_nogil(Stream first, Stream second, Event event):
    """second waits for first, twice over: through an event and through wait_stream."""
    with nogil:
        first.c_record(event)
        second.c_wait_event(event)
        second.c_wait_stream(first)


def event_nogil(Event e, Stream s):
    """Record on s, make s wait on it, wait for it; returns (handle, done)."""
    cdef int done
    with nogil:
        e.c_record(s)
        e.c_wait(s)
        e.c_synchronize()
        done = e.c_query()
    return <uintptr_t>e.c_handle(), done


def graph_handle(Graph g):
    return <uintptr_t>g.c_handle()


def graph_launch_nogil(GraphExec ex, Stream s, int times):
    cdef int i
    with nogil:
        ex.c_upload(s)
        for i in range(times):
            ex.c_launch(s)
    return <uintptr_t>ex.c_handle()


def graph_set_enabled_nogil(GraphExec ex, uintptr_t node, bint enabled):
    with nogil:
        ex.c_set_node_enabled(<void*>node, enabled)


def fill_nogil(Kernel fill_u32, Stream s, uintptr_t ptr, unsigned int value,
               unsigned long long n):
    """streams_fill_u32(ptr, value, n), its arguments packed here as CUDA wants."""
    cdef unsigned long long p = ptr
    cdef void* args[3]
    args[0] = &p
    args[1] = &value
    args[2] = &n
    with nogil:
        fill_u32.c_launch(s, 4, 1, 1, 256, 1, 1, args, 0)
    return <uintptr_t>fill_u32.c_handle()


def prepared_nogil(PreparedLaunch launch, Stream s, int times):
    cdef int i
    with nogil:
        for i in range(times):
            launch.c_launch(s)


# A native host function of this downstream module: streams_host_fn_t is
# declared by `cimport streams`, with no CUDA header.
from streams cimport streams_host_fn_t


cdef void _bump(void* data) noexcept nogil:
    # Memory writes only: CUDA's thread runs it with no GIL.
    (<unsigned long long*>data)[0] += 1


def host_func_nogil(Stream s, uintptr_t counter, int times):
    """Enqueue _bump(counter) `times` times without the GIL."""
    cdef int i
    cdef streams_host_fn_t fn = _bump
    with nogil:
        for i in range(times):
            s.c_launch_host_func(fn, <void*>counter)


def null_host_func_nogil(Stream s):
    with nogil:
        s.c_launch_host_func(NULL, NULL)


def graph_host_node_nogil(Graph g, uintptr_t counter):
    """A host node calling _bump(counter) on every replay; its handle."""
    cdef void* node
    with nogil:
        node = g.c_add_host_node(_bump, <void*>counter, NULL, 0)
    return <uintptr_t>node


def nvtx_nested(domain=None):
    """Two nested NVTX ranges and a mark, without the GIL; what each push
    and pop returned (negative where no tool is attached)."""
    cdef void* d = nvtx_domain(domain)
    cdef int a, b, c, e
    with nogil:
        a = nvtx_range_push(d, b"outer", 0xFF00FF00)
        b = nvtx_range_push(d, b"inner", 0)
        nvtx_mark(d, b"tick", 0)
        c = nvtx_range_pop(d)
        e = nvtx_range_pop(d)
    return a, b, c, e

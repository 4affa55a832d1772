# cython: language_level=3
# A downstream extension that cimports streams, as another project would.
# Built by tests/test_cimport.py with only streams.get_include() added to
# include_dirs: no CUDA headers, no cudart.
from libc.stdint cimport uintptr_t

from streams cimport Event, Stream


def handle_of(Stream s):
    return <uintptr_t>s.c_handle()


def query_nogil(Stream s):
    cdef int done
    with nogil:
        done = s.c_query()
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


def event_query_nogil(Event e):
    cdef int done
    with nogil:
        done = e.c_query()
    return done

# Python host callbacks: payloads, the two enqueue paths (a one-shot work
# item, or a graph-owned node when the stream is being captured), and the
# registry that hands a capture's error slot to the graph it becomes.
from streams._stream cimport ErrorSlot, Stream

cdef enum:
    KIND_HOST_FUNC = 0      # callback(arg)
    KIND_STREAM_CB = 1      # callback(stream, status, arg)


cdef class HostCall:
    cdef object fn
    cdef object arg
    cdef Stream stream       # passed to stream callbacks (or None)
    cdef ErrorSlot sink      # where an exception waits for the owner
    cdef int kind
    cdef bint persistent     # owned by a graph: may run many times


cdef HostCall new_call(object callback, object arg, Stream stream, ErrorSlot sink, int kind)
cdef ErrorSlot new_error_slot()
# Captures and the error slot (and, for begin_capture_to_graph, the Graph)
# their callbacks report to, by CUDA's capture id (unique in the process).
cdef int register_capture(unsigned long long capture_id, ErrorSlot slot, object target,
                          Stream stream) except -1
# By id, or, when CUDA no longer tells the id (an invalidated capture), by
# the stream that captured.
cdef tuple take_capture(unsigned long long capture_id, Stream stream)
# (slot, target, registered now) of a capture, registered first if it is not
# (a new slot, with `target`); a registered capture without a target gets
# `target`.  The target is the Graph of begin_capture_to_graph, or for a
# plain capture what its graph's nodes added through capture_info need (a
# list, which end_capture hands to the Graph it returns).
cdef tuple capture_entry(unsigned long long capture_id, Stream stream, object target)
# A registration made for a capture that ended before it was used.
cdef int forget_capture(unsigned long long capture_id, object slot, Stream stream) except -1
# A native host function (`void fn(void* data)`, no Python): (fn address,
# data address, the object to keep alive while CUDA may call it, or None);
# None when `callback` is Python code (a callable, or a ctypes/cffi callback
# made from a Python function).
cdef tuple native_host_func(object callback, object data, object owner, str fn_name,
                            str data_name)

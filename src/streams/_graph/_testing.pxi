# Private hooks for tests, part of streams._graph (_graph.pyx includes it
# last).

def _swap_kernel_node_lock(lock):
    """Put ``lock`` (a context manager) in place of the lock that kernel
    nodes are read and changed under, and return the one it replaces.
    Private: the tests hold a call there, to order it against another
    thread's."""
    global _kernel_node_lock
    old = _kernel_node_lock
    _kernel_node_lock = lock
    return old


def _pack_change(value, size, type_name=None):
    """``(bytes, kept)``: what ``GraphExec.set_kernel_node_args`` writes for
    ``value`` in a parameter of ``size`` bytes, typed ``type_name`` (a
    signature's type name) or untyped (None), and what it keeps alive for
    it.  Private: the packing checked without a GPU."""
    cdef list keeps = []
    cdef int kind = -1
    if type_name is not None:
        kind = arg_kind(type_name)
        if kind < 0:
            raise ValueError(f"signature: unknown type {type_name!r}")
    b = _arg_bytes(value, as_nbytes(size, "size"), kind, keeps, None, "changes[0]")
    return b, tuple(keeps)


def _error_forwarding(int n, links, int source, relays=(), unlinks=()):
    """Which of ``n`` error slots hold an error once a callback that reports
    to slot ``source`` raised ValueError, with slot ``a`` forwarding its
    errors to slot ``b`` for each ``(a, b)`` of ``links``, then no longer
    for each ``(a, b)`` of ``unlinks``; the slots of ``relays`` (a graph's)
    keep nothing themselves.  The callback runs through the trampoline on a
    thread Python does not know, as a graph's host node does.  Private: the
    forwarding checked without a GPU."""
    cdef HostCall call
    slots = [new_error_slot(i in relays) for i in range(n)]
    for a, b in links:
        (<ErrorSlot>slots[a]).forward_to(<ErrorSlot>slots[b])
    for a, b in unlinks:
        (<ErrorSlot>slots[a]).unforward(<ErrorSlot>slots[b])

    def raising(_):
        raise ValueError("raised by a forwarded callback")

    call = new_call(raising, None, None, <ErrorSlot>slots[source], KIND_HOST_FUNC)
    call.persistent = True
    with nogil:
        rt.call_on_native_thread(<PyObject*>call, 1)
    return [(<ErrorSlot>slot).first is not None for slot in slots]


def _change_args(sizes, args, changes, signature=None, own=None):
    """``(new args, kept)``: what an argument change makes of a node whose
    parameters are ``sizes`` bytes long and hold ``args`` (bytes), its
    kernel's own signature ``own`` (type names, or None).  Private: the
    change checked without a GPU."""
    cdef list kinds = None
    if own is not None:
        kinds = _names_kinds(_signature_type_names(own), tuple(sizes))
    return _changes_to(kinds, tuple(sizes), tuple(args), None, None, changes, signature, None)


def _pinned(deps, types, wanted=None):
    """Which nodes ``_pinned_pairs`` pins, for nodes given by their
    dependency index lists and types (ints); ``wanted`` as there.  Private:
    the pairing rule checked without a GPU."""
    deps = [list(x) for x in deps]
    types = [int(t) for t in types]
    if len(types) != len(deps):
        raise ValueError(f"types: {len(types)} types for {len(deps)} nodes")
    if wanted is not None:
        wanted = [int(i) for i in wanted]
        for i in wanted:
            if not 0 <= i < len(deps):
                raise ValueError(f"wanted: {i} is not the index of a node (0..{len(deps) - 1})")
    return _pinned_pairs(deps, types, wanted)

# Private hooks for tests, part of streams._stream (_stream.pyx includes it
# last).

def _thread_currents(replace=None):
    """A copy of this thread's {device: stream} made current by ``use()`` and
    ``with``; with ``replace``, that mapping becomes the thread's (tests put
    back a thread's exact state with it)."""
    cdef dict cur = _current_map()
    before = dict(cur)
    if replace is not None:
        cur.clear()
        cur.update(replace)
    return before


def _pause_close_before_tail(seconds):
    """Make every Stream.close() pause ``seconds`` (GIL released) after it
    marked the stream closed and before it records the tail; 0 turns it off.
    For tests."""
    global _close_pause_ns
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, not {type(seconds).__name__}")
    if not 0 <= seconds <= 10:
        raise ValueError(f"seconds must be within 0 and 10, got {seconds}")
    _close_pause_ns = <long long>(seconds * 1e9)

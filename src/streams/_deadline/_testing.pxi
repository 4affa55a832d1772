# Private hooks of the tests (tests/deadline/test_deadline_cpu.py): deadlines
# whose marker the host writes, so the watchdog's bookkeeping runs without
# a GPU.  No stream: a fake deadline's watch is its own.

def _fake_deadline(seconds, *, after=None, what="fake work", handler=None):
    """A deadline armed now on a watch of no stream (that of `after`, a
    fake deadline, or a new one); its marker lands when _fake_reach says."""
    cdef Deadline d = _new_deadline(None, _as_seconds(seconds, "seconds"), what, None,
                                    _as_handler(handler, "handler"))
    cdef _Watch w = (<Deadline>after)._watch if after is not None else _new_watch("<no stream>")
    w.seq += 1
    d._marker = w.seq
    d._watch = w
    d._start_ns = streams_now_ns()
    d._due_ns = d._start_ns + <long long>(d.seconds * 1e9)
    _queue(w, d)
    return d


def _fake_reach(Deadline d):
    """Write d's marker into its slot, as the GPU would."""
    streams_u64_set(&d._watch.page.host[d._watch.index], d._marker)


def _fake_wait(Deadline d):
    """What a wait on d's stream checks: raises the expiry kept for it."""
    _raise_expired(d._watch)


def _slot_of(Deadline d):
    """(page number, index) of the slot d's marker lands in."""
    with _lock:
        return (_pages.index(d._watch.page), d._watch.index)


def _is_free(slot):
    """Whether the slot `_slot_of` named is among the free ones."""
    with _lock:
        page = _pages[slot[0]]
        return any(p is page and i == slot[1] for p, i in _free)


def _is_watched(Deadline d):
    """Whether the watchdog still looks at d's watch."""
    with _lock:
        return d._watch in _active

"""The readers of other libraries' streams and events (streams._foreign),
without a GPU: their caches let the classes they read go, and a new class
never gets the answer of a dead one."""
import gc
import inspect
import weakref

from _support import FREE_THREADED

import streams


# ---- foreign reader caches let classes go ---------------------------------------------------

def test_classes_read_as_foreign_streams_and_events_are_collected():
    """A class read as another library's stream or event (the reader cache
    of each kind) is collected once dropped: a dict keyed by the type
    would keep every class ever read."""
    from streams._foreign import _is_foreign_event, _is_foreign_stream

    def make():
        class ProtocolStream:
            def __cuda_stream__(self):
                return (0, 2)

        class TorchLikeStream:
            cuda_stream = 1

        class TorchLikeEvent:
            cuda_event = 0

        class Nothing:
            pass

        assert streams.as_stream(ProtocolStream()).handle == 2
        assert streams.as_stream(TorchLikeStream()).handle == 1
        assert _is_foreign_event(TorchLikeEvent())
        assert not _is_foreign_stream(Nothing()) and not _is_foreign_event(Nothing())
        # A second read, from the cache, answers the same.
        assert streams.as_stream(ProtocolStream()).handle == 2
        assert _is_foreign_event(TorchLikeEvent())
        return [weakref.ref(c) for c in (ProtocolStream, TorchLikeStream, TorchLikeEvent,
                                         Nothing)]

    refs = make()
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    if not FREE_THREADED:
        assert alive == []
    # Free-threaded CPython may keep a class that is only in the cycle with
    # its own __mro__ past a collection (after other threads ran Python in
    # this process); then nothing else may refer to it: no cache of ours.
    for cls in alive:
        others = [h for h in gc.get_referrers(cls)
                  if h is not cls.__mro__ and h is not alive and not inspect.isframe(h)]
        assert others == [], (cls, others)


def test_a_new_class_never_gets_a_dead_class_answer():
    """Entries are keyed by id(type): a class made after another was
    collected (often at the same address) is read afresh."""
    from streams._foreign import _is_foreign_event, _is_foreign_stream
    for _ in range(50):
        stream_type = type("S", (), {"__cuda_stream__": lambda self: (0, 2)})
        event_type = type("E", (), {"cuda_event": 0})
        assert _is_foreign_stream(stream_type()) and _is_foreign_event(event_type())
        del stream_type, event_type
        gc.collect()
        plain = type("P", (), {})
        assert not _is_foreign_stream(plain()) and not _is_foreign_event(plain())
        del plain
        gc.collect()

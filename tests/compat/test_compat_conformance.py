"""What the four compat modules share, checked against each framework's names.

``FRAMEWORKS`` says, for CuPy, PyTorch, Paddle and MindSpore, how each
creates a stream and an event, which stream it reports when none was made
current, how it reads the current stream, which ``with`` manager it
documents, and what it calls recording an event and asking whether a stream
is done.  Every test runs once per framework that has the feature.

The GPU tests observe behaviour, not state: a spin kernel holds a stream
busy so that an ordering shows (``query()`` is False, data not yet
written), the fill / increment kernels compute on device buffers whose
contents are checked with numpy, and the wrappers' lifetimes are checked
with reference counts.  The examples of the Paddle page (record_event,
wait_event, wait_stream, query, synchronize) are in the shape of
``test_record_*``, ``test_event_record_then_wait_event_orders_*``,
``test_wait_stream_*`` and ``test_new_stream_*`` below.  What only one
framework has is in tests/compat/test_compat_<framework>.py.
"""
import contextlib
import gc
import inspect
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable

import pytest

from _support import (BLOCK, GRID, MS, N, close_all, closing, needs_no_gpu, run_python,
                      slow_fill, to_host, uninitialised)

import streams
from streams.compat import cupy as cp
from streams.compat import mindspore as ms
from streams.compat import paddle as pd
from streams.compat import torch as tc
from streams.testing import launch_empty, spin


def _query(stream):
    return stream.query()


@dataclass(frozen=True)
class Framework:
    name: str
    module: object
    stream: Callable            # a new stream that synchronizes with the default stream
    event: Callable             # event(timing: bool) -> a new Event
    current: Callable           # the current stream (of the current device)
    default_handle: int         # the handle it reports when no stream was made current
    guard: Callable             # the documented with-manager: guard(stream)
    guard_arg: str              # its argument's name in its messages; None: `with stream:`
    synchronize: Callable       # waits for every stream of the device; None: not documented
    signatures: tuple           # (object, documented signature or leading parameter names)
    classes: tuple              # (class, the framework's name for it)
    record: str = "record_event"    # the Stream method that records an event and returns it
    query: Callable = _query        # query(stream) -> all work done?
    takes_device: bool = True       # current_stream()/synchronize() take a device argument
    wait_stream: bool = True        # Stream.wait_stream is documented


def _framework(name, module, namespace, documented=(), **fields):
    """The ``Framework`` of ``module``, whose classes are Stream, Event and
    ``documented``, named ``namespace.<name>``.  Unless ``fields`` say
    otherwise, it makes streams and events, reads the current stream and
    synchronizes as PyTorch, Paddle and MindSpore do: ``module.Stream()``,
    ``module.Event(enable_timing=...)``, ``module.current_stream()``,
    ``module.synchronize()``."""
    m = module
    fields.setdefault("stream", m.Stream)
    fields.setdefault("event", lambda timing: m.Event(enable_timing=timing))
    if "current" not in fields:
        fields["current"] = m.current_stream
    if "synchronize" not in fields:
        fields["synchronize"] = m.synchronize
    classes = tuple((c, f"{namespace}.{c.__name__}") for c in (m.Stream, m.Event, *documented))
    return Framework(name=name, module=m, classes=classes, **fields)


def _documented_alike(m, event_wait=True):
    """The methods PyTorch, Paddle and MindSpore document alike, ``Event.wait``
    too where ``event_wait`` (leading parameter names)."""
    alike = ((m.Stream.record_event, ("self", "event")),
             (m.Event.record, ("self", "stream")),
             (m.Event.elapsed_time, ("self", "end_event")))
    return (alike + ((m.Event.wait, ("self", "stream")),)) if event_wait else alike


FRAMEWORKS = [
    _framework(
        "cupy", cp, "cupy.cuda",
        event=lambda timing: cp.Event(disable_timing=not timing),
        current=cp.get_current_stream, default_handle=0,
        guard=lambda s: s, guard_arg=None,     # CuPy: "use the with statement"
        synchronize=None, record="record", query=lambda s: s.done, wait_stream=False,
        signatures=((cp.Stream, "(null=False, non_blocking=False, ptds=False, priority=None)"),
                    (cp.Event, "(block=False, disable_timing=False, interprocess=False)"),
                    (cp.Stream.record, ("self", "event")),
                    (cp.Stream.add_callback, ("self", "callback", "arg")),
                    (cp.Stream.launch_host_func, ("self", "callback", "arg")),
                    (cp.get_elapsed_time, ("start_event", "end_event")))),
    _framework(
        "torch", tc, "torch.cuda", [tc.StreamContext],
        default_handle=0, guard=tc.stream, guard_arg="stream",
        signatures=((tc.Stream, "(device=None, priority=0, **kwargs)"),
                    (tc.Event, "(enable_timing=False, blocking=False, interprocess=False, "
                               "external=False)"),
                    (tc.Stream.priority_range, "()"),
                    (tc.current_stream, "(device=None)"),
                    (tc.default_stream, "(device=None)"),
                    (tc.synchronize, "(device=None)"),
                    (tc.stream, "(stream)"),
                    (tc.set_stream, "(stream)")) + _documented_alike(tc)),
    _framework(
        "paddle", pd, "paddle.device", [pd.stream_guard],
        stream=lambda: pd.Stream(blocking=True), default_handle=1,
        guard=pd.stream_guard, guard_arg="stream",
        signatures=((pd.Stream, "(device=None, priority=None, blocking=False)"),
                    (pd.Event, "(device=None, enable_timing=False, blocking=False, "
                               "interprocess=False)"),
                    (pd.stream_guard, "(stream=None)"),
                    (pd.current_stream, "(device=None)"),
                    (pd.synchronize, "(device=None)")) + _documented_alike(pd, event_wait=False)),
    _framework(
        "mindspore", ms, "mindspore.hal", [ms.StreamCtx],
        default_handle=1, guard=ms.StreamCtx, guard_arg="ctx_stream", takes_device=False,
        signatures=((ms.Stream, "(priority=0, **kwargs)"),
                    (ms.Event, "(enable_timing=False, blocking=False)"),
                    (ms.Stream.wait_event, ("self", "event")),
                    (ms.Stream.wait_stream, ("self", "stream")),
                    (ms.StreamCtx, "(ctx_stream)"),
                    (ms.current_stream, "()"),
                    (ms.synchronize, "()")) + _documented_alike(ms)),
]


def frameworks(*, having=None):
    """``FRAMEWORKS`` as pytest parameters, only those where ``having(fw)`` holds."""
    return [pytest.param(fw, id=fw.name) for fw in FRAMEWORKS if having is None or having(fw)]


def _with_guard(fw):
    return fw.guard_arg is not None


def _record(fw, stream, event=None):
    return getattr(stream, fw.record)(event)


def _per_item(attr):
    return [pytest.param(fw, *item, id=f"{fw.name}-{getattr(item[0], '__qualname__', item[0])}")
            for fw in FRAMEWORKS for item in getattr(fw, attr)]


# ---- no GPU needed -----------------------------------------------------------

@pytest.mark.parametrize("fw, obj, documented", _per_item("signatures"))
def test_documented_signatures(fw, obj, documented):
    sig = inspect.signature(obj)
    if isinstance(documented, str):
        assert str(sig) == documented
    else:
        assert tuple(sig.parameters)[:len(documented)] == documented


@pytest.mark.parametrize("fw, cls, name", _per_item("classes"))
def test_class_docstring_quotes_the_framework_documentation(fw, cls, name):
    assert f"Reproduces ``{name}``" in cls.__doc__


@pytest.mark.parametrize("fw", frameworks())
def test_import_prints_nothing_and_touches_no_handle(fw):
    code = (f"import streams, {fw.module.__name__}; "
            "c = streams.debug_counters(); "
            "assert c['streams_created'] == c['events_created'] == 0, c")
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


@pytest.mark.parametrize("fw", frameworks())
def test_record_checks_its_event_before_cuda(fw):
    with pytest.raises(TypeError, match=r"event must be an Event or None \(a streams\.Event "
                                        r"or any streams\.compat Event\), not str"):
        _record(fw, uninitialised(fw.module.Stream), "not an event")


@pytest.mark.parametrize("fw", frameworks())
def test_event_record_and_wait_check_their_stream_before_cuda(fw):
    event = uninitialised(fw.module.Event)
    for call, bad in ((event.record, "s"), (event.wait, 1)):
        with pytest.raises(TypeError, match=r"stream must be a Stream or None \(a streams\.Stream "
                                            r"or any streams\.compat Stream, or another library's "
                                            rf"stream\), not {type(bad).__name__}"):
            call(bad)
    with pytest.raises(TypeError, match="end_event must be an Event"):
        event.elapsed_time(None)


@pytest.mark.parametrize("fw", frameworks())
def test_uninitialised_stream_refuses_work(fw):
    with pytest.raises(ValueError, match="closed"):
        uninitialised(fw.module.Stream).synchronize()


@pytest.mark.parametrize("fw", frameworks(having=_with_guard))
def test_guard_of_none_is_a_no_op_and_other_objects_are_type_errors(fw):
    with fw.guard(None) as entered:
        assert entered is None
    with pytest.raises(TypeError, match=rf"^{fw.guard_arg} must be a Stream or None .*not str$"):
        fw.guard("s")


@pytest.mark.parametrize("fw", frameworks(having=lambda fw: fw.takes_device))
def test_default_stream_wrappers_of_two_devices_differ(fw):
    # torch: default_stream(0) and default_stream(1) are different streams;
    # the core's device-less default stream stands for any device.
    a, b = fw.module.Stream.from_handle(0), fw.module.Stream.from_handle(0)
    a._device_hint, b._device_hint = 0, 1      # what from_handle(0, device=n) records
    assert not (a == b) and a != b
    assert len({a, b}) == 2
    assert a == streams.Stream.null and streams.Stream.null == b
    assert not (a != streams.Stream.null)
    c = fw.module.Stream.from_handle(0)
    c._device_hint = 0
    assert a == c and not (a != c) and hash(a) == hash(c)


class _FakeDevice:
    """Stands in for streams.Device: records which thread enters and exits it."""

    def __init__(self, index):
        self.index = index
        self.entered_in = None

    def __enter__(self):
        self.entered_in = threading.get_ident()
        return self

    def __exit__(self, *exc):
        if threading.get_ident() != self.entered_in:
            raise AssertionError("a device entered in one thread was exited in another")
        return False


def _fake_default_stream(fw, log):
    """A default-stream wrapper of ``fw`` for device 3 whose ``with`` only
    logs (thread, "enter"/"exit"): the guards' own bookkeeping, without CUDA."""

    class Fake(fw.module.Stream):
        __slots__ = ()

        def __enter__(self):
            log.append((threading.get_ident(), "enter"))
            return self

        def __exit__(self, *exc):
            log.append((threading.get_ident(), "exit"))
            return False

    s = uninitialised(Fake)
    s._device_hint = 3
    return s


def _through_one_guard_at_once(guard, *, around=contextlib.nullcontext, inside=None,
                               after=None, depth=1, n=8):
    """Run ``n`` threads through ``with guard:`` (``depth`` times nested), all
    inside at once: they enter in order 0..n-1 and leave in the same order,
    so an undo stack shared by the threads would give thread 0 the entry of
    thread n-1.  Thread ``i`` does it within ``with around(i):``, calls
    ``inside(i)`` in the guard and ``after(i)`` after it.  Returns what the
    threads raised."""
    turns = [threading.Event() for _ in range(2 * n + 1)]
    failures = []

    def worker(i):
        try:
            with around(i):
                turns[i].wait(10)
                with contextlib.ExitStack() as entered:
                    for _ in range(depth):
                        entered.enter_context(guard)
                    if inside is not None:
                        inside(i)
                    turns[i + 1].set()
                    turns[n + i].wait(10)
                turns[n + i + 1].set()
                if after is not None:
                    after(i)
        except BaseException as exc:   # noqa: BLE001  (returned to the test)
            failures.append(f"thread {i}: {exc!r}")
            turns[n + i + 1].set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    turns[0].set()
    for t in threads:
        t.join(60)
    return failures, threads


@pytest.mark.parametrize("fw", frameworks(having=_with_guard))
def test_guard_stacks_are_per_thread(fw, monkeypatch):
    monkeypatch.setattr(streams, "Device", _FakeDevice)
    log, errors = [], []
    guard = fw.guard(_fake_default_stream(fw, log))
    with guard:
        def exit_without_entering():
            try:
                guard.__exit__(None, None, None)
            except RuntimeError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=exit_without_entering)
        t.start()
        t.join()
    assert errors == [f"{type(guard).__name__} exited in a thread that did not enter it"]
    me = threading.get_ident()
    assert log == [(me, "enter"), (me, "exit")], "the other thread undid nothing"


@pytest.mark.parametrize("fw", frameworks(having=_with_guard))
def test_one_guard_entered_by_8_threads_at_once(fw, monkeypatch):
    # _FakeDevice raises if a thread undoes an entry another thread made.
    monkeypatch.setattr(streams, "Device", _FakeDevice)
    log = []
    failures, threads = _through_one_guard_at_once(
        fw.guard(_fake_default_stream(fw, log)), depth=2)
    assert failures == []
    for t in threads:
        assert [what for who, what in log if who == t.ident] == ["enter"] * 2 + ["exit"] * 2


@needs_no_gpu
@pytest.mark.parametrize("fw", frameworks())
def test_no_gpu_is_a_cuda_error(fw):
    calls = [fw.stream, lambda: fw.event(False), fw.current]
    if fw.takes_device:
        # A negative device is the current device: accepted, then CUDA fails.
        calls.append(lambda: fw.current(-1))
    if fw.synchronize is not None:
        calls.append(fw.synchronize)
    for call in calls:
        with pytest.raises(streams.CudaError):
            call()


@pytest.mark.parametrize("framework", ["torch", "paddle", "mindspore"])
def test_compat_elapsed_time_names_end_event_before_touching_cuda(framework):
    import importlib
    module = importlib.import_module(f"streams.compat.{framework}")
    event = module.Event.__new__(module.Event)     # no CUDA event behind it
    with pytest.raises(TypeError, match=r"end_event must be an Event \(a streams\.Event or any "
                                        r"streams\.compat Event\), not str"):
        event.elapsed_time("not an event")


# ---- GPU ---------------------------------------------------------------------

@pytest.fixture
def nothing_current(restore_current):
    """No stream made current on this thread's device (the core then reports
    Stream.legacy, which is what making it current explicitly does)."""
    streams.Stream.legacy.use()


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_new_stream_query_and_synchronize(fw):
    with closing(fw.stream()) as s:
        assert isinstance(s, fw.module.Stream)
        assert s.device_id == streams.get_device()
        assert fw.query(s) is True, "nothing queued"
        spin(s, 200 * MS)
        assert fw.query(s) is False
        t0 = time.perf_counter()
        s.synchronize()
        assert time.perf_counter() - t0 > 0.1
        assert fw.query(s) is True


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_record_allocates_or_records_the_given_event(fw):
    s = fw.stream()
    given = fw.event(False)
    try:
        spin(s, 200 * MS)
        new = _record(fw, s)
        assert type(new) is fw.module.Event
        assert _record(fw, s, given) is given, "returns the event it recorded"
        assert new.query() is False and given.query() is False, "both behind the spin"
        given.synchronize()
        assert new.query() is True and fw.query(s) is True
        new.close()
    finally:
        close_all(given, s)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_event_record_then_wait_event_orders_future_work(fw, kernels, device_buffer):
    # Paddle's example: e = Event(); e.record(s1); s2.wait_event(e); with
    # x = 7 written on s1 behind a spin and y = x + 1 computed on s2 after
    # the wait: without it, y would be 0 + 1.
    x, y = device_buffer(), device_buffer()
    s1, s2 = fw.stream(), fw.stream()
    e = fw.event(False)
    try:
        slow_fill(s1, kernels, x, 7)
        assert e.record(s1) is None
        t0 = time.perf_counter()
        s2.wait_event(e)
        assert time.perf_counter() - t0 < 0.1, "wait_event must not block the host"
        streams.memcpy_async(y, x, stream=s2)
        s2.launch(kernels.increment, GRID, BLOCK, y, N)
        assert fw.query(s2) is False, "s2 waits for the event"
        assert (to_host(y, s2) == 8).all()
        assert e.query() is True
    finally:
        s1.synchronize()
        close_all(e, s1, s2)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks(having=lambda fw: fw.wait_stream))
@pytest.mark.concurrent
def test_wait_stream_waits_for_the_work_queued_before_the_call_only(fw, kernels, device_buffer):
    # torch: "All future work submitted to this stream will wait until all
    # kernels submitted to a given stream at the time of call complete."
    x, y = device_buffer(), device_buffer()
    s1, s2 = fw.stream(), fw.stream()
    try:
        slow_fill(s2, kernels, x, 41)
        t0 = time.perf_counter()
        s1.wait_stream(s2)
        assert time.perf_counter() - t0 < 0.1, "wait_stream must not block the host"
        spin(s2, 1000 * MS)              # queued after the call: s1 must not wait for it
        streams.memcpy_async(y, x, stream=s1)
        s1.launch(kernels.increment, GRID, BLOCK, y, N)
        assert fw.query(s1) is False, "s1 waits for what s2 had queued"
        assert (to_host(y, s1) == 42).all()
        assert fw.query(s2) is False, "s1 did not wait for s2's later spin"
    finally:
        s2.synchronize()
        close_all(s1, s2)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_event_record_and_wait_default_to_the_current_stream(fw, restore_current):
    s1, s2 = fw.stream(), fw.stream()
    start, end = fw.event(True), fw.event(True)
    try:
        with fw.guard(s1):
            assert start.record() is None       # stream=None: the current stream, s1
            spin(s1, 200 * MS)
            assert end.record() is None
        assert end.query() is False, "recorded on s1, behind the spin"
        with fw.guard(s2):
            assert end.wait() is None           # stream=None: the current stream, s2
        launch_empty(s2)
        assert fw.query(s2) is False, "s2 waits for end"
        end.synchronize()
        assert 150 < start.elapsed_time(end_event=end) < 5000
        s2.synchronize()
    finally:
        close_all(start, end, s1, s2)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_guard_selects_the_stream_and_restores_the_previous_one(fw, restore_current):
    before = fw.current()
    with closing(fw.stream()) as s:
        with fw.guard(s) as entered:
            assert entered is s
            assert fw.current() is s
            spin(streams.current_stream(), 200 * MS)     # where operators would go
            if _with_guard(fw):
                with fw.guard(None):                     # a no-op, even nested
                    assert fw.current() is s
        assert fw.query(s) is False, "the spin went to s"
        assert fw.current() is before
        s.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_default_stream_synchronizes_with_blocking_streams(fw, nothing_current):
    default = fw.current()
    assert isinstance(default, fw.module.Stream)
    assert default.handle == fw.default_handle and default.device_id == -1
    with closing(fw.stream()) as s:
        spin(s, 200 * MS)
        launch_empty(default)
        assert fw.query(default) is False, "default-stream work waits for s"
        default.synchronize()
        assert fw.query(s) is True


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_current_stream_of_a_new_thread_is_the_default_stream(fw, restore_current):
    seen = []
    with closing(fw.stream()) as s:
        with fw.guard(s):
            t = threading.Thread(target=lambda: seen.append(fw.current()))
            t.start()
            t.join()
            assert fw.current() is s
        assert isinstance(seen[0], fw.module.Stream)
        assert seen[0].handle == fw.default_handle and seen[0] != s


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_current_stream_is_one_wrapper_per_stream(fw, restore_current, kernels, device_buffer):
    core, other = streams.Stream(), fw.stream()
    x = device_buffer()
    try:
        with core:
            first = fw.current()
            assert isinstance(first, fw.module.Stream) and first.owner is core
            assert fw.current() is first
            if fw.takes_device:
                assert fw.current(streams.get_device()) is first
                assert fw.current(-1) is first
            with fw.guard(other):
                assert fw.current() is other
            assert fw.current() is first, "the same wrapper after switching back"
            first.launch(kernels.fill, GRID, BLOCK, x, 5, N)   # work through the wrapper...
        assert (to_host(x, core) == 5).all()                   # ...is work on the stream
    finally:
        close_all(core, other)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_wrappers_never_wrap_wrappers(fw, restore_current):
    core = streams.Stream()
    try:
        for lender in FRAMEWORKS:            # another module's wrapper made current
            with core:
                borrowed = lender.current()
            if lender is fw:
                continue
            assert borrowed.owner is core
            # ...and a wrapper of that wrapper, as a user could make one.
            chained = streams.Stream.from_handle(core.handle, owner=borrowed,
                                                 device=core.device_id)
            for current in (borrowed, chained):
                with current:
                    mine = fw.current()
                assert mine.owner is core and mine.handle == core.handle
    finally:
        core.close()


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks())
def test_current_stream_wrapper_does_not_outlive_its_users(fw, restore_current):
    # use(), not `with`: a with block holds a reference of its own.
    core = streams.Stream().use()
    try:
        before = sys.getrefcount(core)
        wrapper = fw.current()
        assert sys.getrefcount(core) == before + 1, "the wrapper holds its stream"
        gone = weakref.ref(wrapper)
        del wrapper
        gc.collect()
        assert gone() is None, "no cache keeps the wrapper"
        assert sys.getrefcount(core) == before, "nor the stream"
        assert fw.current().owner is core, "a new wrapper of the same stream"
    finally:
        core.close()


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks(having=lambda fw: fw.synchronize is not None))
def test_synchronize_waits_for_every_stream_of_the_device(fw, kernels, device_buffer):
    x, y = device_buffer(), device_buffer()
    a, b = fw.stream(), fw.stream()
    try:
        slow_fill(a, kernels, x, 1, 150 * MS)
        slow_fill(b, kernels, y, 2, 150 * MS)
        t0 = time.perf_counter()
        fw.synchronize()
        assert time.perf_counter() - t0 > 0.1
        assert fw.query(a) is True and fw.query(b) is True
        assert (to_host(x, a) == 1).all() and (to_host(y, b) == 2).all()
    finally:
        close_all(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", frameworks(having=_with_guard))
def test_one_guard_object_used_by_8_threads_restores_each_threads_stream(fw, nothing_current):
    # The guard's stream is a default-stream wrapper for device 0, so each
    # entry also makes device 0 current.  Each thread starts on its own
    # device (i % device_count) with its own stream current; after the
    # block each must have its own device and stream back.
    count = streams.device_count()
    with streams.Device(0):
        streams.Stream.legacy.use()
        guard = fw.guard(fw.current())
    assert guard.stream.device_id == -1
    mine, seen = {}, {}

    @contextlib.contextmanager
    def own_device_and_stream(i):
        streams.set_device(i % count)
        mine[i] = streams.Stream()
        try:
            with mine[i]:
                yield
        finally:
            mine[i].close()

    def inside(i):
        seen[i] = {"device inside": streams.get_device(), "current inside": fw.current()}

    def after(i):
        seen[i].update({"device after": streams.get_device(),
                        "own stream back": streams.current_stream() is mine[i]})

    failures, _ = _through_one_guard_at_once(guard, around=own_device_and_stream,
                                             inside=inside, after=after)
    assert failures == []
    for i in range(8):
        assert seen[i] == {"device inside": 0, "current inside": guard.stream,
                           "device after": i % count, "own stream back": True}, f"thread {i}"


@pytest.mark.gpu
@pytest.mark.skipif(streams.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("fw", frameworks(having=lambda fw: fw.takes_device and _with_guard(fw)))
def test_default_streams_of_two_devices(fw, nothing_current):
    with streams.Device(1):
        streams.Stream.legacy.use()
    d0, d1 = fw.current(0), fw.current(1)
    assert d0 != d1 and not (d0 == d1)
    assert d0.handle == d1.handle == fw.default_handle
    with streams.Device(0):
        with fw.guard(d1):
            assert streams.get_device() == 1, "the guard makes the wrapper's device current"
            assert fw.current() is d1
        assert streams.get_device() == 0

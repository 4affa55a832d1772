"""Without a GPU: a native host function's data given as ctypes.byref(x),
Stream.sm_count decided by the stream and never by its owner's module, the
queue of failed releases after a fork made while another thread held its
lock, NVRTC's library closed again when it is not NVRTC, the foreign reader
caches letting classes go, and the lazily resolved cuFuncGetName published
with atomics.  The GPU halves are in test_audit_misc_gpu.py."""
import ctypes
import gc
import inspect
import importlib
import re
import shutil
import textwrap
import weakref
from pathlib import Path

import pytest

from _support import FREE_THREADED, module_source, run_python

import streams
from streams import GreenContext, SmPartition, Stream
from streams._hostcall import _native_host_func
from streams.testing import native_increment

ROOT = Path(__file__).resolve().parent.parent


# ---- native host functions: ctypes.byref ------------------------------------------------------

def test_byref_is_native_data_at_its_address_and_keeps_its_object():
    """ctypes.byref(x, offset) is the address of x plus offset, and what is
    kept (until the call has run) is the byref object, which holds x.
    The failure it catches: TypeError "must be None, an int address or a
    ctypes/cffi pointer, not CArgObject", while the refusal of a ctypes
    scalar tells the user to pass ctypes.byref(x)."""
    words = (ctypes.c_uint64 * 2)()
    for offset in (0, 8):
        ref = ctypes.byref(words, offset)
        fn, data, keep = _native_host_func(native_increment, ref, owner="o")
        assert (fn, data) == (native_increment, ctypes.addressof(words) + offset)
        assert keep[0] is ref and keep[1] == "o"
        assert keep[0]._obj is words, "the byref object keeps what it points into"
    # The advice of the refusal of a scalar is an accepted form.
    with pytest.raises(TypeError, match=r"pass ctypes.byref\(x\)"):
        _native_host_func(native_increment, ctypes.c_uint64(0))
    fn, data, keep = _native_host_func(native_increment, ctypes.byref(ctypes.c_uint64(0)))
    assert data != 0 and keep is not None


def test_a_ctypes_parameter_that_is_not_a_pointer_is_refused():
    """The other CArgObjects (from_param of a simple type) carry a value,
    not an address."""
    with pytest.raises(TypeError, match="is not a pointer"):
        _native_host_func(native_increment, ctypes.c_int.from_param(5))


def test_byref_reaches_cuda_from_launch_host_func():
    """The whole call takes it: here (no GPU) it gets as far as CUDA."""
    counter = ctypes.c_uint64(0)
    if streams.device_count() > 0:
        pytest.skip("the GPU half (test_audit_misc_gpu.py) runs the function")
    with pytest.raises(streams.CudaError):
        Stream.legacy.launch_host_func(native_increment, ctypes.byref(counter))


# ---- Stream.sm_count: the stream decides --------------------------------------------------

class _LooksGreen:
    """An owner whose type claims the green module's name."""


_LooksGreen.__module__ = "streams._green"


def _outcome(fn):
    try:
        return ("value", fn())
    except Exception as exc:
        return ("raises", type(exc))


@pytest.mark.parametrize("make_owner", [
    lambda: GreenContext.__new__(GreenContext),
    lambda: SmPartition.__new__(SmPartition),
    _LooksGreen,
], ids=["GreenContext", "SmPartition", "module-named-green"])
def test_sm_count_is_decided_by_the_stream_not_its_owner(make_owner):
    """A wrapper of the legacy stream answers as the legacy stream does,
    whatever its owner is (here: no driver, the same CudaError; on a GPU,
    the device's SMs), never the owner's type's module: an owner of
    streams._green other than the private handle would raise
    AttributeError from the property."""
    expected = _outcome(lambda: Stream.legacy.sm_count)
    wrapped = Stream.from_handle(1, owner=make_owner())
    got = _outcome(lambda: wrapped.sm_count)
    assert got == expected
    assert got[1] is not AttributeError


# ---- the queue of failed releases after a fork ------------------------------------------------

_FORK_WHILE_HELD = textwrap.dedent(r"""
    import os, signal, sys, threading, time, warnings
    import streams
    from streams import _cudart

    # A failure of the parent's, queued and not yet reported.
    _cudart._queue_cleanup_failure("event", 0x5678, 700)
    holder = threading.Thread(target=_cudart._hold_cleanup_lock, args=(3.0,))
    holder.start()
    deadline = time.monotonic() + 10
    while _cudart._cleanup_lock_holds() == 0:
        if time.monotonic() > deadline:
            print("NEVER HELD", flush=True)
            sys.exit(1)
        time.sleep(0.001)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            _cudart._queue_cleanup_failure("stream", 0x1234, 700)
            _cudart._flush_cleanup_warnings()
        words = sorted(" ".join(str(w.message).split()[:4]) for w in got)
        os.write(1, ("CHILD " + repr(words) + "\n").encode())
        os._exit(0)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("CHILD HUNG", flush=True)
            break
        time.sleep(0.01)
    holder.join()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _cudart._flush_cleanup_warnings()
    print("PARENT", sorted(" ".join(str(w.message).split()[:4]) for w in got), flush=True)
""")


def test_fork_while_another_thread_holds_the_cleanup_lock():
    """A thread holds the lock of the queue of failed releases (as a
    release failing on another thread does for a moment) while the process
    forks: the child's first failure and flush work, and the child reports
    only its own failures (the parent's queue names the parent's handles).
    With a PyThread lock that the fork handler does not re-make, the child
    hangs at its first release failure."""
    result = run_python(_FORK_WHILE_HELD, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "CHILD HUNG" not in lines, result.stdout
    child = [line for line in lines if line.startswith("CHILD ")]
    assert child == ["CHILD ['streams: releasing stream 0x1234']"], result.stdout
    parent = [line for line in lines if line.startswith("PARENT ")]
    assert parent == ["PARENT ['streams: releasing event 0x5678']"], result.stdout


def test_the_cleanup_lock_hook_lets_go():
    """The test hook holds the lock and lets it go: after it, failures queue
    and flush as before."""
    from streams import _cudart
    _cudart._hold_cleanup_lock(0.01)
    assert _cudart._cleanup_lock_holds() == 0
    with pytest.warns(streams.CudaWarning, match="stream 0x4321"):
        _cudart._queue_cleanup_failure("stream", 0x4321, 700)
        _cudart._flush_cleanup_warnings()


# ---- NVRTC: a library that is not NVRTC is closed again -----------------------------------

def _some_shared_object():
    for name in ("_ctypes", "_json", "array", "select", "math", "_struct"):
        try:
            path = getattr(importlib.import_module(name), "__file__", None)
        except ImportError:
            continue
        if path and path.endswith(".so"):
            return path
    pytest.skip("no extension module of the standard library is a shared object here")


_NOT_NVRTC = textwrap.dedent(r"""
    import ctypes, os, sys
    from streams._launch import nvrtc_info
    path = os.environ["STREAMS_NVRTC"]
    for attempt in range(3):
        try:
            nvrtc_info()
            print("LOADED AS NVRTC")
        except RuntimeError as exc:
            print("REFUSED", "not an NVRTC library" in str(exc))
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        print("STILL MAPPED")
    except OSError:
        print("CLOSED")
""")


def test_a_library_that_is_not_nvrtc_is_closed_again(tmp_path):
    """STREAMS_NVRTC names a shared object without NVRTC's symbols (a copy
    of one, so that nothing else has it open): each attempt is refused
    naming it, and the library is closed again, not left loaded (dlopen
    without dlclose, one more reference each attempt)."""
    lib = tmp_path / "libnot_nvrtc.so"
    shutil.copyfile(_some_shared_object(), lib)
    result = run_python(_NOT_NVRTC, timeout=60, extra_env={"STREAMS_NVRTC": str(lib)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:4] == ["REFUSED True"] * 3 + ["CLOSED"], result.stdout


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


# ---- lazily resolved driver functions are published with atomics ------------------------------

def test_func_get_name_table_is_read_and_written_atomically():
    """cuFuncGetName/cuKernelGetName are looked up at first use from any
    thread: every read and write of their table goes through the atomic
    helpers (release store of the pointer, then of the state; acquire loads
    in the other order), as the package's other lazy tables do: plain
    reads and writes would be a data race on a free-threaded build."""
    source = module_source("_cudart")
    uses = [line.strip() for line in source.splitlines()
            if re.search(r"_get_name_(ptr|state)\[", line)]
    assert uses, "the table is gone: update this test"
    plain = [line for line in uses
             if not re.search(r"streams_(flag_get|flag_set|ptr_load|ptr_store)\(&_get_name_",
                              line)
             and not re.match(r"(cdef \w+\*? _get_name_|_get_name_\w+\[\d\] = (NULL|0)$)", line)]
    assert not plain, plain

"""The call layer's shared state across forks and threads, without a GPU:
the queue of failed releases after a fork made while another thread held
its lock, and the lazily resolved driver functions (cuFuncGetName,
cuKernelGetName) published with atomics."""
import re
import textwrap

import pytest

from _support import module_source, run_python

import streams


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

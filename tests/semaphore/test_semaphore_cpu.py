"""TimelineSemaphore's host side, which needs no GPU: the counter, its
waits (timeouts, Ctrl-C, threads, asyncio), descriptors and imports in
this process and in spawned children, a dead exporter, abandonment, the
argument checks that come before any CUDA call, and the resource pattern
(close, use after close, objects made with __new__, live_semaphores)."""
import asyncio
import gc
import multiprocessing
import os
import pickle
import signal
import threading
import time

import pytest

import streams
from streams import SemaphoreAbandoned, SemaphoreDescriptor, TimelineSemaphore

import _sem_children

MAX = TimelineSemaphore.MAX_VALUE
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def sem():
    s = TimelineSemaphore()
    yield s
    s.close()


def _spawn(target, *args):
    """A spawned child running `target(*args, conn)`, and this side's end
    of its pipe."""
    here, there = SPAWN.Pipe()
    proc = SPAWN.Process(target=target, args=(*args, there), daemon=True)
    proc.start()
    there.close()
    return proc, here


def _spawn_first(target, *args):
    """As _spawn, with the pipe first among `target`'s arguments."""
    here, there = SPAWN.Pipe()
    proc = SPAWN.Process(target=target, args=(there, *args), daemon=True)
    proc.start()
    there.close()
    return proc, here


def _reap(proc, timeout=30):
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        pytest.fail("the child did not end")


# ---- the counter --------------------------------------------------------------------------

def test_the_counter_starts_where_asked_and_only_grows():
    with TimelineSemaphore(7) as s:
        assert s.value == 7 and s.abandoned is None and s.exporter_pid is None
        s.signal_host(7)                  # its own value: a no-op
        s.signal_host(10)
        assert s.value == 10
        with pytest.raises(ValueError, match="value=9 goes backwards: the semaphore is at 10"):
            s.signal_host(9)
        s.signal_host(MAX)
        assert s.value == MAX
    assert TimelineSemaphore.MAX_VALUE == 2**62 - 1


@pytest.mark.parametrize("bad, exc, match", [
    (-1, ValueError, "value must be >= 0, got -1"),
    (2**62, ValueError, r"value=4611686018427387904 is past TimelineSemaphore.MAX_VALUE"),
    (1.0, TypeError, "value must be an int, not float"),
    ("1", TypeError, "value must be an int, not str"),
    (True, TypeError, "value must be an int, not bool"),
    (None, TypeError, "value must be an int, not NoneType"),
])
def test_bad_values_are_refused_naming_the_argument(sem, bad, exc, match):
    for call in (sem.signal_host, sem.wait_host, sem.wait_async,
                 lambda v: sem.signal(streams.Stream.legacy, v),
                 lambda v: sem.wait(streams.Stream.legacy, v)):
        with pytest.raises(exc, match=match):
            call(bad)
    assert sem.value == 0


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="initial_value must be >= 0"):
        TimelineSemaphore(-5)
    with pytest.raises(TypeError, match="initial_value must be an int"):
        TimelineSemaphore("0")
    with pytest.raises(ValueError, match="path must be None, 'memops' or 'kernel'"):
        TimelineSemaphore(path="cuda")
    with TimelineSemaphore(path="kernel") as k, TimelineSemaphore(path="memops") as m:
        assert k.path == "kernel" and m.path == "memops"     # asked for: no CUDA needed


def test_a_numpy_integer_is_a_value(sem):
    np = pytest.importorskip("numpy")
    sem.signal_host(np.uint64(3))
    assert sem.wait_host(np.int32(3)) is True


def test_bad_timeouts_follow_the_one_timeout_rule(sem):
    for bad, exc in ((True, TypeError), ("1", TypeError), (-1, ValueError),
                     (float("nan"), ValueError)):
        with pytest.raises(exc, match="timeout"):
            sem.wait_host(1, timeout=bad)
        with pytest.raises(exc, match="timeout"):
            sem.wait_async(1, timeout=bad)


# ---- host waits ---------------------------------------------------------------------------

def test_wait_host_returns_false_when_the_timeout_expires(sem):
    t0 = time.monotonic()
    assert sem.wait_host(1, timeout=0.05) is False
    assert 0.05 <= time.monotonic() - t0 < 2
    assert sem.wait_host(0, timeout=0) is True      # reached already: no wait
    assert sem.wait_host(1, timeout=0) is False


def test_a_signal_from_another_thread_ends_a_wait(sem):
    timer = threading.Timer(0.05, sem.signal_host, (5,))
    timer.start()
    try:
        assert sem.wait_host(4, timeout=10) is True
    finally:
        timer.join()
    assert sem.value == 5


def test_the_wait_releases_the_gil(sem):
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        sem.wait_host(1, timeout=0.3)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 30, f"the other thread ran {len(ticks)} times during a 300 ms wait"


@pytest.mark.timing
def test_ctrl_c_interrupts_wait_host(sem):
    # Python's own handler, also where this process started with SIGINT
    # ignored (a background job of a shell, as some CI runners start it).
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
        t0 = time.perf_counter()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            sem.wait_host(1)
        latency = time.perf_counter() - t0 - 0.2
        timer.join()
    finally:
        signal.signal(signal.SIGINT, old)
    assert latency < 0.1, f"KeyboardInterrupt came {latency * 1e3:.1f} ms after SIGINT"
    sem.signal_host(1)                    # still usable
    assert sem.wait_host(1) is True


def test_wait_async_waits_without_blocking_the_loop(sem):
    async def main():
        waiter = asyncio.ensure_future(sem.wait_async(3, timeout=10))
        await asyncio.sleep(0.02)
        assert not waiter.done()
        sem.signal_host(3)
        assert await waiter is True
        assert await sem.wait_async(2) is True
        t0 = asyncio.get_running_loop().time()
        assert await sem.wait_async(4, timeout=0.05) is False
        assert asyncio.get_running_loop().time() - t0 >= 0.04

    asyncio.run(main())


def test_a_cancelled_wait_async_leaves_nothing_behind(sem):
    async def main():
        waiter = asyncio.ensure_future(sem.wait_async(1))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
    sem.signal_host(1)


# ---- abandonment --------------------------------------------------------------------------

def test_abandon_poisons_the_counter_and_host_waits_raise(sem):
    sem.signal_host(4)
    sem.abandon("the producer gave up")
    assert sem.abandoned == "the producer gave up"
    assert sem.value > MAX                # the poison satisfies every wait on the GPU
    with pytest.raises(SemaphoreAbandoned, match="the producer gave up") as info:
        sem.wait_host(2)                  # even a value reached before: it is poisoned now
    assert info.value.reason == "the producer gave up"
    with pytest.raises(SemaphoreAbandoned):
        sem.signal_host(5)
    with pytest.raises(SemaphoreAbandoned):
        sem.signal(streams.Stream.legacy, 5)
    with pytest.raises(SemaphoreAbandoned):
        sem.wait(streams.Stream.legacy, 5)

    async def main():
        with pytest.raises(SemaphoreAbandoned):
            await sem.wait_async(1)

    asyncio.run(main())
    sem.abandon("a second reason")        # idempotent: the first reason stays
    assert sem.abandoned == "the producer gave up"
    assert "abandoned" in repr(sem)


def test_abandon_releases_a_waiting_thread(sem):
    result = []

    def wait():
        try:
            sem.wait_host(100, timeout=10)
        except SemaphoreAbandoned as exc:
            result.append(exc.reason)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    sem.abandon("stop")
    t.join(10)
    assert result == ["stop"]


def test_abandon_takes_a_str_and_keeps_1024_bytes(sem):
    with pytest.raises(TypeError, match="reason must be a str, not bytes"):
        sem.abandon(b"why")
    sem.abandon("é" * 2000)
    assert sem.abandoned.startswith("é" * 500) and len(sem.abandoned.encode()) <= 1024


def test_the_exception_pickles_with_its_reason():
    err = pickle.loads(pickle.dumps(SemaphoreAbandoned("peer died")))
    assert type(err) is SemaphoreAbandoned and err.reason == "peer died"
    assert isinstance(err, RuntimeError) and "peer died" in str(err)
    assert b"streams._" not in pickle.dumps(SemaphoreAbandoned("x"))


# ---- descriptors and imports --------------------------------------------------------------

def test_a_descriptor_pickles_and_imports_in_this_process(sem):
    desc = sem.export()
    assert isinstance(desc, SemaphoreDescriptor) and desc.pid == os.getpid()
    assert pickle.loads(pickle.dumps(desc)) == desc and hash(desc) == hash(sem.export())
    assert b"streams._" not in pickle.dumps(desc)
    with TimelineSemaphore.import_(desc) as other:
        assert other.exporter_pid is None          # its own process
        other.signal_host(3)
        assert sem.value == 3
        sem.abandon("seen by both")
        assert other.abandoned == "seen by both"


@pytest.mark.parametrize("args, exc, match", [
    ((0, 3, bytes(16)), ValueError, "pid must be a process id"),
    ((1, -1, bytes(16)), ValueError, "fd must be a file descriptor number"),
    (("1", 3, bytes(16)), TypeError, "pid must be an int, not str"),
    ((1, 3.0, bytes(16)), TypeError, "fd must be an int, not float"),
    ((1, 3, bytes(8)), ValueError, "nonce must be the 16 bytes"),
    ((1, 3, "x" * 16), ValueError, "nonce must be the 16 bytes"),
])
def test_descriptors_check_their_fields(args, exc, match):
    with pytest.raises(exc, match=match):
        SemaphoreDescriptor(*args)


def test_import_refuses_what_is_not_a_live_descriptor(sem, tmp_path):
    with pytest.raises(TypeError, match="desc must be a streams.SemaphoreDescriptor, not dict"):
        TimelineSemaphore.import_({"pid": 1})
    good = sem.export()
    other = SemaphoreDescriptor(good.pid, good.fd, bytes(16))
    with pytest.raises(ValueError, match="another timeline semaphore"):
        TimelineSemaphore.import_(other)
    page = tmp_path / "page"
    page.write_bytes(bytes(4096))
    with open(page, "rb") as f:         # a page-sized file that is no semaphore
        with pytest.raises(ValueError, match="is not a timeline semaphore"):
            TimelineSemaphore.import_(SemaphoreDescriptor(os.getpid(), f.fileno(), good.nonce))
    with pytest.raises(ValueError, match="no longer holds the semaphore"):
        TimelineSemaphore.import_(SemaphoreDescriptor(os.getpid(), 2**20, good.nonce))
    sem.close()
    with pytest.raises(ValueError, match="no longer holds the semaphore|not a timeline"):
        TimelineSemaphore.import_(good)          # the exporter closed it


def test_a_descriptor_of_a_process_that_ended_is_refused():
    proc, conn = _spawn_first(_sem_children.export_then_exit, 0, 0)
    desc = conn.recv()
    conn.send("go")
    _reap(proc)
    with pytest.raises(ValueError, match=f"process {desc.pid} is gone"):
        TimelineSemaphore.import_(desc)


def test_spawned_children_import_and_signal(sem):
    # One after the other: two signallers racing could each see the other's
    # higher value and be refused (the counter never goes backwards).
    replies = []
    for values in ((1, 2, 3), (4, 5)):
        proc, conn = _spawn(_sem_children.import_and_signal, sem.export(), values)
        try:
            replies.append(conn.recv())
        finally:
            _reap(proc)
    assert all(r[0] == "done" and r[2] == os.getpid() for r in replies), replies
    assert sem.wait_host(5, timeout=10) is True and sem.value == 5


def test_a_spawned_child_waits_for_this_process(sem):
    proc, conn = _spawn(_sem_children.import_and_wait, sem.export(), 4, 30)
    try:
        time.sleep(0.2)
        assert not conn.poll()
        sem.signal_host(4)
        assert conn.poll(30)
        kind, ok, _ = conn.recv()
        assert (kind, ok) == ("waited", True)
    finally:
        _reap(proc)


def test_an_abandon_reaches_a_waiting_child(sem):
    proc, conn = _spawn(_sem_children.import_and_wait, sem.export(), 4, 30)
    try:
        time.sleep(0.2)
        sem.abandon("shutting down")
        assert conn.poll(30)
        assert conn.recv()[:2] == ("abandoned", "shutting down")
    finally:
        _reap(proc)


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_a_wait_raises_once_the_exporter_is_gone(how):
    proc, conn = _spawn_first(_sem_children.export_then_exit, 0, 60)
    desc = conn.recv()
    try:
        with TimelineSemaphore.import_(desc) as sem:
            assert sem.exporter_pid == proc.pid
            conn.send("signal")
            assert conn.recv() == "signalled"
            assert sem.wait_host(1, timeout=10) is True      # the exporter's signal
            conn.send("go")
            if how == "killed":
                os.kill(proc.pid, signal.SIGKILL)
            else:
                proc.terminate()
            t0 = time.monotonic()
            with pytest.raises(SemaphoreAbandoned, match=f"exporting process {proc.pid} ended"):
                sem.wait_host(2, timeout=30)
            assert time.monotonic() - t0 < 5
            # Abandoned for every user of the page: its GPU waiters are released.
            assert sem.value > MAX and sem.abandoned.startswith("the exporting process")
    finally:
        _reap(proc)


def test_a_reached_value_is_not_an_error_after_the_exporter_ended():
    proc, conn = _spawn_first(_sem_children.export_then_exit, 3, 0)
    desc = conn.recv()
    with TimelineSemaphore.import_(desc) as sem:
        conn.send("go")
        _reap(proc)
        assert sem.wait_host(3, timeout=1) is True      # reached: nothing to wait for
        with pytest.raises(SemaphoreAbandoned):
            sem.wait_host(4, timeout=10)


def test_wait_async_raises_once_the_exporter_is_gone():
    proc, conn = _spawn_first(_sem_children.export_then_exit, 0, 60)
    desc = conn.recv()
    try:
        with TimelineSemaphore.import_(desc) as sem:
            conn.send("go")
            os.kill(proc.pid, signal.SIGKILL)

            async def main():
                with pytest.raises(SemaphoreAbandoned, match="ended"):
                    await sem.wait_async(1, timeout=30)

            asyncio.run(main())
    finally:
        _reap(proc)


# ---- the resource pattern -----------------------------------------------------------------

def test_close_is_idempotent_and_later_use_is_refused():
    s = TimelineSemaphore()
    desc = s.export()
    s.close()
    s.close()
    assert s.closed and repr(s) == "<streams.TimelineSemaphore (closed)>"
    for use in (lambda: s.value, lambda: s.abandoned, lambda: s.signal_host(1),
                lambda: s.wait_host(1), lambda: s.wait_async(1), lambda: s.abandon("x"),
                lambda: s.export(), lambda: s.path,
                lambda: s.signal(streams.Stream.legacy, 1),
                lambda: s.wait(streams.Stream.legacy, 1)):
        with pytest.raises(ValueError, match="operation on a closed TimelineSemaphore"):
            use()
    assert desc.pid == os.getpid()


def test_an_object_made_with_new_is_inert():
    s = TimelineSemaphore.__new__(TimelineSemaphore)
    assert repr(s) == "<streams.TimelineSemaphore (closed)>"
    with pytest.raises(ValueError, match="never initialised"):
        s.signal_host(1)
    s.close()


def test_init_runs_once():
    with TimelineSemaphore() as s:
        with pytest.raises(RuntimeError, match="already initialised"):
            s.__init__()


def test_a_semaphore_does_not_pickle(sem):
    with pytest.raises(TypeError, match=r"pickle sem.export\(\)"):
        pickle.dumps(sem)


def test_live_semaphores_counts_the_open_ones():
    before = streams.debug_counters()["live_semaphores"]
    a = TimelineSemaphore()
    b = TimelineSemaphore.import_(a.export())
    assert streams.debug_counters()["live_semaphores"] == before + 2
    a.close()
    del b                                  # dropped unclosed: released by __dealloc__
    gc.collect()
    assert streams.debug_counters()["live_semaphores"] == before


def test_a_closed_semaphore_in_a_wait_of_another_thread_is_safe():
    s = TimelineSemaphore()
    errors = []

    def wait():
        try:
            s.wait_host(1, timeout=0.3)
        except Exception as exc:          # noqa: BLE001 (reported below)
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    s.close()                              # the waiter is inside: it keeps the page
    t.join()
    assert not errors and s.closed


def test_the_public_names():
    assert {"TimelineSemaphore", "SemaphoreAbandoned", "SemaphoreDescriptor"} <= set(
        streams.__all__)
    assert TimelineSemaphore.__module__ == "streams"
    assert issubclass(SemaphoreAbandoned, RuntimeError)

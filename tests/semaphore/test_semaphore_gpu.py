"""TimelineSemaphore on the GPU, on both paths ("memops": the driver's
64-bit stream memory operations; "kernel": the one-thread kernels):
stream-ordered signals and waits against a control stream that does not
wait, the host releasing GPU waits and seeing GPU signals, captured waits
released by abandon() in replayed graphs, close() with work still queued,
and a producer and a consumer process exchanging a buffer (one killed
mid-run: the consumer raises within its timeout and no stream stays
blocked).  Children that can crash or hang run in child processes.

Every test releases what may still wait before it ends (abandon() in a
finally): a stream left blocked would hang the next synchronize_device.
"""
import asyncio
import multiprocessing
import os
import signal
import textwrap
import time
from multiprocessing.reduction import recv_handle, send_handle

import pytest

np = pytest.importorskip("numpy", reason="the semaphore GPU tests check results with numpy")

from _support import BLOCK, GRID, MS, N, run_python, to_host

import streams
from streams import SemaphoreAbandoned, Stream, TimelineSemaphore
from streams.testing import spin

import _sem_children

pytestmark = pytest.mark.gpu
SPAWN = multiprocessing.get_context("spawn")


def _device_has_memops():
    if streams.device_count() == 0:
        return False
    with TimelineSemaphore() as s:
        return s.path == "memops"


@pytest.fixture(params=["memops", "kernel"])
def path(request):
    if request.param == "memops" and not _device_has_memops():
        pytest.skip("this device has no 64-bit stream memory operations")
    return request.param


@pytest.fixture
def sem(path):
    """A semaphore on the path under test.  Tests take it last, so that its
    teardown (abandon: every wait released) runs before the other
    fixtures' synchronize_device."""
    s = TimelineSemaphore(path=path)
    yield s
    # Whatever the test left waiting is released before the leak check's
    # synchronize_device.
    s.abandon("test teardown")
    streams.synchronize_device()
    s.close()


@pytest.fixture
def ready(kernels):
    """The conftest's kernels, each launched once: a first launch may load
    its kernel, and a load may wait for every stream of the device, one
    blocked on a semaphore among them (Stream.wait_value)."""
    s = Stream(non_blocking=True)
    buf = streams.DeviceBuffer(N * 4, stream=s)
    s.launch(kernels.fill, GRID, BLOCK, buf, 0, N)
    s.launch(kernels.increment, GRID, BLOCK, buf, N)
    spin(s, 1)
    s.synchronize()
    buf.close()
    s.synchronize()
    s.close()
    return kernels


def _not_done_after(stream, seconds=0.1):
    time.sleep(seconds)
    return stream.query() is False


def test_path_is_the_one_asked_for_or_the_devices_own(path, sem):
    assert sem.path == path
    with TimelineSemaphore() as auto:
        assert auto.path == ("memops" if _device_has_memops() else "kernel")


@pytest.mark.concurrent   # the control runs beside the spin
def test_a_wait_holds_its_stream_until_the_signal(ready, device_buffer, closer, sem):
    signaller = closer(Stream(non_blocking=True))
    waiter = closer(Stream(non_blocking=True))
    control = closer(Stream(non_blocking=True))
    waited, free = device_buffer(), device_buffer()
    spin(signaller, 1500 * MS)     # outlasts the host's steps on a loaded machine
    sem.signal(signaller, 1)
    sem.wait(waiter, 1)
    waiter.launch(ready.fill, GRID, BLOCK, waited, 7, N)
    control.launch(ready.fill, GRID, BLOCK, free, 7, N)     # no wait: runs at once
    assert control.synchronize(timeout=10) is True
    assert _not_done_after(waiter), "the wait did not hold the stream"
    assert (to_host(free, control) == 7).all()
    assert signaller.synchronize(timeout=10) is True
    assert waiter.synchronize(timeout=10) is True
    assert (to_host(waited, waiter) == 7).all()
    assert sem.value == 1


def test_a_host_signal_releases_a_gpu_wait(ready, device_buffer, closer, sem):
    s = closer(Stream(non_blocking=True))
    buf = device_buffer()
    sem.wait(s, 5)
    s.launch(ready.fill, GRID, BLOCK, buf, 3, N)
    assert _not_done_after(s)
    sem.signal_host(4)                    # not enough
    assert _not_done_after(s, 0.05)
    sem.signal_host(5)
    assert s.synchronize(timeout=10) is True
    assert (to_host(buf, s) == 3).all()


def test_the_host_sees_a_gpu_signal(closer, sem):
    s = closer(Stream(non_blocking=True))
    spin(s, 1000 * MS)
    sem.signal(s, 3)
    assert sem.wait_host(3, timeout=0.01) is False      # the spin is still running
    t0 = time.monotonic()
    assert sem.wait_host(3, timeout=10) is True
    assert time.monotonic() - t0 < 5
    assert sem.value == 3
    assert s.synchronize(timeout=10) is True


def test_wait_async_sees_a_gpu_signal(closer, sem):
    s = closer(Stream(non_blocking=True))

    async def main():
        spin(s, 100 * MS)
        sem.signal(s, 2)
        return await sem.wait_async(2, timeout=10)

    assert asyncio.run(main()) is True


def test_gpu_signals_refuse_to_go_backwards(closer, sem):
    s = closer(Stream(non_blocking=True))
    spin(s, 200 * MS)
    sem.signal(s, 5)                      # enqueued, not yet written
    with pytest.raises(ValueError, match="value=4 goes backwards: the semaphore is at 0, "
                                         "and a signal of 5 is enqueued"):
        sem.signal(s, 4)
    sem.signal(s, 5)                      # the same value again is allowed
    assert s.synchronize(timeout=10) is True
    with pytest.raises(ValueError, match="goes backwards: the semaphore is at 5"):
        sem.signal_host(3)


def test_signals_and_waits_replay_in_a_graph(path, ready, device_buffer, closer):
    start = closer(TimelineSemaphore(path=path))
    done = closer(TimelineSemaphore(path=path))
    s = closer(Stream(non_blocking=True))
    buf = device_buffer()
    try:
        with s.capture() as cap:
            start.wait(s, 1)
            s.launch(ready.increment, GRID, BLOCK, buf, N)
            done.signal(s, 1)
        exe = closer(cap.graph.instantiate())
        closer(cap.graph)
        assert start.value == 0 and done.value == 0          # captured, not run
        exe.launch(s)
        assert _not_done_after(s)
        start.signal_host(1)
        assert done.wait_host(1, timeout=10) is True
        exe.launch(s)                     # the wait is met now; the signal repeats 1
        assert s.synchronize(timeout=10) is True
        assert (to_host(buf, s) == 2).all()
    finally:
        start.abandon("test teardown")


def test_abandon_releases_a_captured_wait_in_a_replayed_graph(ready, device_buffer, closer,
                                                              sem):
    s = closer(Stream(non_blocking=True))
    buf = device_buffer()
    with s.capture() as cap:
        sem.wait(s, 10)
        s.launch(ready.fill, GRID, BLOCK, buf, 9, N)
    exe = closer(cap.graph.instantiate())
    closer(cap.graph)
    exe.launch(s)
    exe.launch(s)
    assert _not_done_after(s), "the captured wait did not hold the replay"
    sem.abandon("the producer is gone")
    assert s.synchronize(timeout=10) is True, "abandon() did not release the replays"
    assert (to_host(buf, s) == 9).all()
    exe.launch(s)                         # later replays pass the poisoned wait at once
    assert s.synchronize(timeout=10) is True
    with pytest.raises(SemaphoreAbandoned, match="the producer is gone"):
        sem.wait_host(1)


def test_close_with_a_wait_queued_parks_the_page(path, ready, device_buffer, closer):
    sem = TimelineSemaphore(path=path)
    other = TimelineSemaphore.import_(sem.export())      # another view of the same page
    s = closer(Stream(non_blocking=True))
    buf = device_buffer()
    try:
        sem.wait(s, 1)
        s.launch(ready.fill, GRID, BLOCK, buf, 4, N)
        parked = streams._cudart._parked_count()
        t0 = time.monotonic()
        sem.close()                       # never waits: the GPU still reads the page
        assert time.monotonic() - t0 < 1
        assert streams._cudart._parked_count() == parked + 1
        other.signal_host(1)
        assert s.synchronize(timeout=10) is True
        assert (to_host(buf, s) == 4).all()
        streams._cudart._drain_deferred()
        assert streams._cudart._parked_count() == parked
    finally:
        other.abandon("test teardown")
        streams.synchronize_device()
        sem.close()
        other.close()


def test_streams_of_every_device_share_a_semaphore(path, closer):
    if streams.device_count() < 2:
        pytest.skip("needs two GPUs")
    sem = closer(TimelineSemaphore(path=path))
    a = closer(Stream(device=0, non_blocking=True))
    b = closer(Stream(device=1, non_blocking=True))
    try:
        spin(a, 100 * MS)
        sem.signal(a, 1)
        sem.wait(b, 1)
        sem.signal(b, 2)
        assert sem.wait_host(2, timeout=10) is True
    finally:
        sem.abandon("test teardown")


def test_memops_asked_for_where_the_device_has_none_is_refused(closer):
    if _device_has_memops():
        pytest.skip("this device has 64-bit stream memory operations")
    sem = closer(TimelineSemaphore(path="memops"))
    s = closer(Stream(non_blocking=True))
    with pytest.raises(ValueError, match="path='memops' was asked for, but device"):
        sem.signal(s, 1)


def test_gpu_operations_check_their_arguments_first(closer, sem):
    s = closer(Stream(non_blocking=True))
    with pytest.raises(TypeError, match="stream must be a streams.Stream"):
        sem.signal("stream", 1)
    with pytest.raises(ValueError, match="value must be >= 0"):
        sem.wait(s, -1)
    closed = TimelineSemaphore()
    closed.close()
    with pytest.raises(ValueError, match="closed TimelineSemaphore"):
        closed.wait(s, 1)
    assert sem.value == 0


# A page registered (the first GPU operation of a semaphore) while a stream
# of the process waits for a value the host will write: CUDA orders a
# page-locking against queued work on some systems, which would never
# finish.  In a child: a deadlock is this test's failure, not a hung run.
REGISTER_WHILE_WAITING = textwrap.dedent("""
    import streams
    from streams import Stream, TimelineSemaphore
    for path in PATHS:
        blocked, later = TimelineSemaphore(path=path), TimelineSemaphore(path=path)
        a, b = Stream(non_blocking=True), Stream(non_blocking=True)
        blocked.wait(a, 1)                    # a waits for the host
        later.signal(b, 1)                    # later's first GPU operation: registers
        assert later.wait_host(1, timeout=20), path
        blocked.signal_host(1)
        assert a.synchronize(timeout=20), path
        for obj in (blocked, later, a, b):
            obj.close()
    print("REGISTERED")
""")


def test_registering_a_page_while_a_stream_waits_does_not_deadlock():
    paths = ["memops", "kernel"] if _device_has_memops() else ["kernel"]
    result = run_python(f"PATHS = {paths!r}\n" + REGISTER_WHILE_WAITING, timeout=120)
    assert result.returncode == 0 and "REGISTERED" in result.stdout, result.stderr


# ---- two processes ------------------------------------------------------------------------

def _spawn(target, *args):
    here, there = SPAWN.Pipe()
    proc = SPAWN.Process(target=target, args=(there, *args), daemon=True)
    proc.start()
    there.close()
    return proc, here


def _recv(conn, timeout, what):
    if not conn.poll(timeout):
        pytest.fail(f"no {what} within {timeout} s")
    return conn.recv()


def _end(*procs):
    for proc in procs:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _start_pair(rounds, elems, path, spin_us, wait_timeout):
    """A producer and a consumer, the producer's pool descriptor passed on;
    returns them once the consumer has imported everything."""
    producer, pc = _spawn(_sem_children.gpu_producer, rounds, elems, path, spin_us)
    consumer, cc = _spawn(_sem_children.gpu_consumer, rounds, elems, wait_timeout)
    try:
        ready = _recv(pc, 120, "producer")
        fd = recv_handle(pc)
        cc.send(ready)
        send_handle(cc, fd, consumer.pid)
        os.close(fd)
        assert _recv(cc, 120, "consumer") == "imported"
    except BaseException:
        for proc in (producer, consumer):
            proc.kill()
        _end(producer, consumer)
        raise
    return producer, pc, consumer, cc, ready


@pytest.mark.concurrent
def test_a_producer_and_a_consumer_exchange_a_buffer(path):
    # Every round is checked: row i of what the consumer copied holds i.
    # The kernel path spins a kernel per wait, and two processes' kernels
    # take turns on the GPU by time slices, so it makes fewer rounds.
    rounds = 10_000 if path == "memops" else 300
    elems = 64
    producer, pc, consumer, cc, _ = _start_pair(rounds, elems, path, 0, 60)
    try:
        t0 = time.monotonic()
        pc.send("go")
        kind, outcome, waited_s, unblocked, rows = _recv(cc, 180, "result")
        elapsed = time.monotonic() - t0
        assert _recv(pc, 120, "producer's end") == ("done", True)
        pc.send("bye")
    finally:
        _end(producer, consumer)
    assert outcome == ("waited", True), outcome
    assert unblocked
    expected = np.arange(1, rounds + 1, dtype=np.uint32)[:, None]
    bad = np.nonzero((rows != expected).any(axis=1))[0]
    assert bad.size == 0, f"rounds {bad[:10] + 1} hold {rows[bad[:10], 0]}"
    assert producer.exitcode == 0 and consumer.exitcode == 0
    if path == "memops":
        assert elapsed < 20, f"{rounds} exchanges took {elapsed:.1f} s"


@pytest.mark.concurrent
def test_a_killed_producer_does_not_wedge_the_consumer(path):
    rounds, elems, timeout = 100, 64, 60
    producer, pc, consumer, cc, ready = _start_pair(rounds, elems, path, 20 * MS, timeout)
    watch = TimelineSemaphore.import_(ready[1])          # the host's view of "full"
    try:
        pc.send("go")
        assert watch.wait_host(5, timeout=60) is True
        seen = watch.value
        os.kill(producer.pid, signal.SIGKILL)
        kind, outcome, waited_s, unblocked, rows = _recv(cc, timeout + 60, "result")
    finally:
        watch.close()
        _end(producer, consumer)
    assert outcome[0] == "abandoned", outcome
    assert f"exporting process {producer.pid} ended" in outcome[1]
    assert waited_s < timeout, f"the consumer raised after {waited_s:.1f} s"
    assert unblocked, "the consumer's stream stayed blocked"
    assert consumer.exitcode == 0
    # What was signalled before the kill was copied whole.
    expected = np.arange(1, seen + 1, dtype=np.uint32)[:, None]
    assert (rows[:seen] == expected).all()

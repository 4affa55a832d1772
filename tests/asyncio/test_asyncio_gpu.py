"""``await stream`` / ``await event``: completion through the eventfd
doorbell (no polling, no GIL on CUDA's thread), in the order of the GPU
work, cancellation, the polling fallback, and a loop closed while waits are
pending (in a child process)."""
import asyncio
import gc
import textwrap

import pytest

from _support import MS, global_capture_in_thread, run_in_loop_without_readers, run_python

import streams
from streams import Event, Stream
from streams._asyncio import _async_waits
from streams.testing import spin

pytestmark = pytest.mark.gpu


def _settled():
    gc.collect()
    return _async_waits()


def test_await_stream_and_event(stream):
    async def main():
        spin(stream, 100 * MS)
        await stream
        assert stream.query()
        ev = Event()
        spin(stream, 50 * MS)
        ev.record(stream)
        await ev.wait_async()
        assert ev.query()
        await ev                   # already done: returns at once
        ev.close()
        await stream.wait_async()
    asyncio.run(main())
    assert _settled() == {"waiting": 0, "in_flight": 0}


@pytest.mark.concurrent   # the loop runs while the spin does
def test_the_loop_keeps_running_while_the_gpu_works(stream):
    async def main():
        ticks = 0
        spin(stream, 300 * MS)
        waiter = asyncio.ensure_future(stream.wait_async())
        while not waiter.done():
            ticks += 1
            await asyncio.sleep(0.01)
        return ticks
    assert asyncio.run(main()) >= 10


def test_1000_awaits_on_different_streams_all_finish():
    # Completion order across 1000 streams is not defined by CUDA (streams
    # share a few hardware queues, and host functions run on CUDA's own
    # threads): only that every await completes, once, and nothing stays.
    count = 1000
    pool = [Stream(non_blocking=True) for _ in range(count)]
    finished = []

    async def wait_for(i, s):
        await s
        finished.append(i)

    async def main():
        for i, s in enumerate(pool):
            spin(s, 5 * MS + (i % 10) * MS)
        await asyncio.gather(*(wait_for(i, s) for i, s in enumerate(pool)))

    try:
        asyncio.run(main())
    finally:
        for s in pool:
            s.synchronize()
            s.close()
    assert sorted(finished) == list(range(count))
    assert _settled() == {"waiting": 0, "in_flight": 0}


@pytest.mark.concurrent   # the loop runs while the spin does
def test_awaits_finish_in_the_order_the_gpu_finishes():
    # A chain the GPU must run in order: stream i starts its spin only once
    # stream i-1's is done (an event), and each spin lasts 40 ms, far more
    # than a host function's latency.  The awaits are started in the
    # reverse order, so that the order they finish in comes from the GPU.
    count = 6
    chain = [Stream(non_blocking=True) for _ in range(count)]
    marks = [Event() for _ in range(count)]
    finished = []

    async def wait_for(i):
        await chain[i]
        finished.append(i)

    async def main():
        for i, s in enumerate(chain):
            if i:
                s.wait_event(marks[i - 1])
            spin(s, 40 * MS)
            marks[i].record(s)
        await asyncio.gather(*(wait_for(i) for i in reversed(range(count))))

    try:
        asyncio.run(main())
    finally:
        for s in chain:
            s.synchronize()
        for obj in chain + marks:
            obj.close()
    assert finished == list(range(count))
    assert _settled() == {"waiting": 0, "in_flight": 0}


@pytest.mark.concurrent   # the loop runs while the spin does
def test_cancelling_a_wait_leaves_nothing_behind(stream):
    async def main():
        spin(stream, 300 * MS)
        task = asyncio.ensure_future(stream.wait_async())
        await asyncio.sleep(0.02)
        assert _async_waits()["waiting"] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _async_waits()["waiting"] == 0
        assert _async_waits()["in_flight"] == 1    # the host function is still queued
        stream.synchronize()
        await asyncio.sleep(0.05)                 # the loop reads the doorbell
        assert _async_waits() == {"waiting": 0, "in_flight": 0}
    asyncio.run(main())


def test_awaiting_a_capturing_stream_is_refused(stream):
    spin(stream, 0)             # loaded before the capture
    stream.synchronize()

    async def main():
        stream.begin_capture()
        try:
            spin(stream, 1 * MS)
            with pytest.raises(RuntimeError, match="being captured"):
                await stream
            # Refused without a query, which would have invalidated it.
            assert stream.capture_status == "active"
        finally:
            stream.end_capture().close()
    asyncio.run(main())
    assert _settled() == {"waiting": 0, "in_flight": 0}


@pytest.mark.parametrize("what", ["stream", "event"])
def test_an_await_leaves_another_threads_global_capture_alone(stream, what):
    """Another thread captures a different stream in global mode while this
    one awaits: the await's status query is made in relaxed mode, so CUDA
    neither refuses it nor invalidates that capture.  The failure it
    catches: the await raises CudaError (an unsafe call during a global
    capture) and the other thread's end_capture fails, the capture
    invalidated."""
    other = Stream()
    spin(other, 0)
    spin(stream, 0)
    stream.synchronize()
    other.synchronize()
    ev = Event()
    # Queued before the capture begins: the test is about the await alone
    # (this thread's own calls are in global mode).
    spin(stream, 50 * MS)
    ev.record(stream)

    async def main():
        await (stream if what == "stream" else ev)
    with global_capture_in_thread(other) as ended:
        asyncio.run(main())
    # (Queried only now: this thread's own queries are in global mode.)
    assert stream.query() and ev.query()
    assert len(ended) == 1 and isinstance(ended[0], streams.Graph), ended
    ended[0].close()
    ev.close()
    other.close()
    assert _settled() == {"waiting": 0, "in_flight": 0}


def test_a_loop_without_add_reader_polls(stream):
    async def main():
        spin(stream, 50 * MS)
        await stream
        assert stream.query()
    run_in_loop_without_readers(main)


def test_wait_async_needs_a_stream_or_event():
    with pytest.raises(TypeError, match="needs a streams.Stream or Event"):
        streams._asyncio.wait_async(object())


def test_a_loop_closed_with_waits_pending():
    # The host function rings a doorbell nobody reads any more; once the
    # loop is gone its notifier is freed by the last host function.
    code = textwrap.dedent("""
        import asyncio, gc
        import streams
        from streams._asyncio import _async_waits
        from streams.testing import spin

        s = streams.Stream()
        loop = asyncio.new_event_loop()
        spin(s, 300 * 1000)
        task = loop.create_task(s.wait_async())
        loop.run_until_complete(asyncio.sleep(0.02))
        assert _async_waits()["waiting"] == 1
        loop.close()                     # the task is still pending
        try:
            loop.run_until_complete(task)
        except RuntimeError as exc:
            assert "closed" in str(exc)
        del task, loop
        gc.collect()
        s.synchronize()                  # the host function runs after the loop went
        assert _async_waits() == {"waiting": 0, "in_flight": 0}, _async_waits()
        s.close()
        # A fresh loop works as before.
        async def again():
            t = streams.Stream()
            spin(t, 10 * 1000)
            await t
            t.close()
        asyncio.run(again())
        print("OK")
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout

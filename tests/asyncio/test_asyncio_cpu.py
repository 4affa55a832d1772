"""The asyncio doorbell without a GPU, driven by a probe that plays CUDA's
host-function thread: completion order, cancelled waits, a ring after the
loop closed, loops without add_reader, and the type checks of wait_async."""
import asyncio
import random
import textwrap
import threading

import pytest

from _support import run_in_loop_without_readers, run_python

from streams import Stream
from streams._asyncio import _async_waits, _doorbell_entries, _probe_wait, wait_async


# ---- the asyncio doorbell --------------------------------------------------------------------

def test_waits_complete_in_the_order_the_host_functions_ran():
    async def main():
        pairs = [_probe_wait() for _ in range(1000)]
        order = list(range(1000))
        random.Random(16).shuffle(order)
        finished = []

        async def wait(i, awaitable):
            await awaitable
            finished.append(i)

        tasks = [asyncio.ensure_future(wait(i, aw)) for i, (aw, _) in enumerate(pairs)]
        assert _async_waits() == {"waiting": 1000, "in_flight": 1000}
        # Another thread, without the GIL while it rings: CUDA's thread.
        ringer = threading.Thread(target=lambda: [pairs[i][1].ring() for i in order])
        ringer.start()
        await asyncio.gather(*tasks)
        ringer.join()
        return order, finished

    order, finished = asyncio.run(main())
    assert finished == order
    assert _async_waits() == {"waiting": 0, "in_flight": 0}


def test_a_cancelled_wait_is_freed_when_its_host_function_runs():
    async def main():
        awaitable, probe = _probe_wait()
        task = asyncio.ensure_future(awaitable)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _async_waits() == {"waiting": 0, "in_flight": 1}
        probe.ring()
        await asyncio.sleep(0.05)
        assert _async_waits() == {"waiting": 0, "in_flight": 0}
        with pytest.raises(RuntimeError, match="already rung"):
            probe.ring()
    asyncio.run(main())


def test_a_ring_after_the_loop_closed_frees_everything():
    # In a child: a use after free here would crash the interpreter.
    code = textwrap.dedent("""
        import asyncio, gc
        from streams._asyncio import _async_waits, _probe_wait

        loop = asyncio.new_event_loop()
        async def start():
            return _probe_wait()
        awaitable, probe = loop.run_until_complete(start())
        task = loop.create_task(awaitable)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert _async_waits() == {"waiting": 1, "in_flight": 1}, _async_waits()
        loop.close()
        task = awaitable = loop = None
        gc.collect()
        assert _async_waits() == {"waiting": 0, "in_flight": 0}   # the loop's doorbell went
        probe.ring()        # frees the node and the notifier, and closes the eventfd
        print("OK")
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_doorbells_of_closed_and_dead_loops_are_dropped():
    """Loops made, awaited on, closed and let go, one after another (a new
    one often gets a dead one's id): each awaits through a doorbell of its
    own, and the table keeps none of the old ones."""
    import gc

    async def one():
        aw, probe = _probe_wait()
        threading.Thread(target=probe.ring).start()
        await aw

    before = _doorbell_entries()
    for _ in range(30):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(one())
        finally:
            loop.close()
        del loop
        gc.collect()
    assert _doorbell_entries() == before
    assert _async_waits() == {"waiting": 0, "in_flight": 0}


def test_a_loop_without_add_reader_has_no_doorbell():
    async def main():
        with pytest.raises(NotImplementedError, match="polls"):
            _probe_wait()
    run_in_loop_without_readers(main)


def test_wait_async_type_check_and_awaitables():
    with pytest.raises(TypeError, match="needs a streams.Stream or Event"):
        wait_async(3)
    import inspect
    assert inspect.isawaitable(Stream.legacy)

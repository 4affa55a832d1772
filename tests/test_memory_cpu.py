"""Issue 16 without a GPU: argument checks of MemoryPool, LaunchConfig,
memcpy_batch_async and the stream memory operations, the picklable IPC
descriptor, and the asyncio doorbell driven by a probe that plays CUDA's
host-function thread."""
import asyncio
import pickle
import random
import textwrap
import threading

import pytest

from _support import run_in_loop_without_readers, run_python

import streams
from streams import IpcBufferDescriptor, LaunchConfig, MemoryPool, Stream
from streams._hostcall import _async_waits, _probe_wait, wait_async


# ---- MemoryPool and IpcBufferDescriptor ----------------------------------------------------

def test_pool_arguments_are_checked_before_cuda():
    with pytest.raises(ValueError, match="max_size must be >= 0"):
        MemoryPool(max_size=-1)
    with pytest.raises(ValueError, match="release_threshold must be >= 0"):
        MemoryPool(release_threshold=-5)
    with pytest.raises(TypeError, match="ipc must be a bool"):
        MemoryPool(ipc="yes")
    with pytest.raises(TypeError, match="max_size must be an int"):
        MemoryPool(max_size=1.5)
    with pytest.raises(ValueError, match="fd must be a file descriptor"):
        MemoryPool.import_handle(-1)
    with pytest.raises(TypeError, match="fd must be an int"):
        MemoryPool.import_handle("3")


def test_an_uninitialised_pool_is_closed():
    pool = MemoryPool.__new__(MemoryPool)
    assert pool.closed
    for call in (lambda: pool.allocate(16), lambda: pool.trim(), lambda: pool.export_handle(),
                 lambda: pool.used_current, lambda: pool.handle):
        with pytest.raises(ValueError, match="closed MemoryPool"):
            call()
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        pool.allocate(-1)
    pool.close()
    assert repr(pool) == "<streams.MemoryPool (closed)>"


def test_descriptor_pickles_and_checks():
    d = IpcBufferDescriptor(bytes(range(64)), 4096, 0)
    again = pickle.loads(pickle.dumps(d))
    assert again == d and again.data == bytes(range(64)) and again.nbytes == 4096
    assert d != IpcBufferDescriptor(bytes(64), 4096, 0)
    with pytest.raises(ValueError, match="64 bytes"):
        IpcBufferDescriptor(b"short", 1, 0)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        IpcBufferDescriptor(bytes(64), -1, 0)


# ---- memcpy_batch_async and stream memory operations ---------------------------------------

def test_memcpy_batch_arguments():
    streams.memcpy_batch_async([])
    with pytest.raises(TypeError, match="copies must be a sequence"):
        streams.memcpy_batch_async(3)
    with pytest.raises(TypeError, match="copies must be a sequence"):
        streams.memcpy_batch_async(b"xy")
    with pytest.raises(TypeError, match=r"copies\[0\] must be a \(dst, src, nbytes\) tuple"):
        streams.memcpy_batch_async([[1, 2, 3]])
    with pytest.raises(TypeError, match=r"copies\[1\] must be"):
        streams.memcpy_batch_async([(1, 2, 3), (1,)])


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.wait_value(0x1000, 1, "lt"), ValueError, "op must be 'geq', 'eq', 'and' or"),
    (lambda s: s.wait_value(0x1000, 1, 7), ValueError, "op must be"),
    (lambda s: s.wait_value(0x1000, -1), ValueError, "does not fit 32 unsigned bits"),
    (lambda s: s.wait_value(0x1000, 1 << 32), ValueError, "does not fit 32 unsigned bits"),
    (lambda s: s.wait_value(0x1000, 1 << 64, width=64), ValueError, "does not fit 64"),
    (lambda s: s.write_value(0x1000, 1, width=8), ValueError, "width must be 32 or 64"),
    (lambda s: s.write_value(0x1000, 1.5), TypeError, "value must be an int"),
    (lambda s: s.write_value(0x1000, True), TypeError, "value must be an int"),
])
def test_memory_operation_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(Stream.legacy)


# ---- LaunchConfig ----------------------------------------------------------------------------

def test_launch_config_holds_what_it_was_given():
    cfg = LaunchConfig((4, 2), 128, 1024, cluster=2, cooperative=True,
                       programmatic_stream_serialization=True, priority=-1,
                       mem_sync_domain="Remote")
    assert cfg.grid == (4, 2, 1) and cfg.block == (128, 1, 1) and cfg.shared_mem == 1024
    assert cfg.cluster == (2, 1, 1) and cfg.cooperative is True
    assert cfg.programmatic_stream_serialization is True
    assert cfg.priority == -1 and cfg.mem_sync_domain == "remote"
    assert cfg.programmatic_event is None and cfg.completion_event is None
    assert "cluster=(2, 1, 1)" in repr(cfg) and "priority=-1" in repr(cfg)
    plain = LaunchConfig(1, 1)
    assert plain.cluster is None and plain.priority is None and plain.mem_sync_domain is None
    assert repr(plain) == "LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1))"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"grid": 0}, ValueError, "grid"),
    ({"block": "x"}, TypeError, "block"),
    ({"shared_mem": -1}, ValueError, "shared_mem must be >= 0"),
    ({"cluster": (1, 2, 3, 4)}, TypeError, "cluster must be an int or a tuple"),
    ({"cooperative": "yes"}, TypeError, "cooperative must be a bool"),
    ({"priority": "high"}, TypeError, "priority must be an int"),
    ({"mem_sync_domain": "local"}, ValueError, "mem_sync_domain must be 'default', 'remote'"),
    ({"trigger_at_block_start": True}, ValueError, "needs a programmatic_event"),
    ({"completion_event": object()}, TypeError, "completion_event must be a streams.Event"),
])
def test_launch_config_arguments(kwargs, error, message):
    args = {"grid": 1, "block": 1}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        LaunchConfig(**args)


def test_launch_config_is_immutable():
    cfg = LaunchConfig(1, 1)
    with pytest.raises(AttributeError):
        cfg.priority = 3


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
        from streams._hostcall import _async_waits, _probe_wait

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

"""The package's shared tables and objects used from many threads at once,
without a GPU.  On a free-threaded CPython (3.13t, no GIL: tools/free_threaded.sh
runs this suite under one) the threads really run side by side; with a GIL
the same tests check the same results, interleaved.

Each hammer runs in a child Python: a missing lock can crash the process."""
import sys
import sysconfig
import textwrap

import pytest

import _support
from _support import FREE_THREADED, refcount_back, run_python

import streams

THREADS = 8
# The hammer's child imports the shared thread harness (tests/_support.py).
TESTS = _support.ROOT / "tests"


def run_hammer(body, timeout=120):
    """Run ``body`` in a child; it prints ``OK`` last when every check held."""
    code = textwrap.dedent("""
        import sys, threading
        sys.path.insert(0, %r)
        import streams
        from streams import Stream, Event
        from _support import in_threads

        THREADS = %d

        def hammer(work, rounds):
            # `work(i, k)` in THREADS threads, `rounds` times each, all
            # started at once; the exceptions they raised, by type name.
            errors = []
            lock = threading.Lock()

            def rounds_of(i):
                for k in range(rounds):
                    try:
                        work(i, k)
                    except Exception as exc:
                        with lock:
                            errors.append(f"{type(exc).__name__}: {exc}")

            escaped = in_threads(rounds_of, THREADS)
            return errors + [f"{type(exc).__name__}: {exc}" for exc in escaped]
    """ % (str(TESTS), THREADS)) + textwrap.dedent(body)
    result = run_python(code, timeout=timeout)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert result.stdout.strip().splitlines()[-1] == "OK", (result.stdout[-2000:],
                                                            result.stderr[-3000:])
    return result


def test_the_build_declares_free_threading_where_it_matters():
    """On a free-threaded interpreter, importing every module of the package
    leaves the GIL off: each extension declares that it runs without it."""
    if not FREE_THREADED:
        pytest.skip("a CPython with a GIL: nothing to declare")
    result = run_python(textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("error", RuntimeWarning)
        import streams, streams.testing
        from streams import (_cudart, _handle, _args, _device, _foreign, _stream, _hostcall,
                             _asyncio, _memory, _launch, _graph)
        print("GIL", sys._is_gil_enabled())
    """), timeout=60, extra_env={"PYTHON_GIL": None})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["GIL", "False"]


def test_foreign_stream_readers_from_many_threads():
    """The per-type cache of how a foreign stream gives its handle is filled
    from 8 threads at once, for new types each round: every answer is the
    stream the object names."""
    run_hammer("""
        def make_type(i, k):
            # A new type each call: each is a first lookup in the cache.
            if (i + k) % 3 == 0:
                return type(f"P{i}_{k}", (), {"__cuda_stream__": lambda self: (0, 2)})
            if (i + k) % 3 == 1:
                return type(f"C{i}_{k}", (), {"cuda_stream": 1})
            return type(f"N{i}_{k}", (), {})

        def work(i, k):
            t = make_type(i, k)
            obj = t()
            kind = (i + k) % 3
            if kind == 2:
                try:
                    streams.as_stream(obj)
                except TypeError:
                    return
                raise AssertionError("an object that names no stream was taken")
            got = streams.as_stream(obj)
            want = Stream.per_thread if kind == 0 else Stream.legacy
            assert got == want and got.handle == want.handle, (got, want)

        errors = hammer(work, 300)
        assert not errors, errors[:5]
        print("OK")
    """)


def test_special_streams_and_handles_from_many_threads():
    """from_handle of the special handles, their properties, equality and
    close(), from 8 threads: always equal to the singletons, never closed."""
    run_hammer("""
        specials = {0: Stream.null, 1: Stream.legacy, 2: Stream.per_thread}

        def work(i, k):
            h = (i + k) % 3
            s = Stream.from_handle(h)
            assert s == specials[h] and hash(s) == hash(specials[h]), (h, s)
            assert s.handle == h
            assert s.owner is None
            assert not s.closed
            s.close()           # a no-op for the special streams
            assert not s.closed

        errors = hammer(work, 2000)
        assert not errors, errors[:5]
        print("OK")
    """)


def test_new_made_objects_refuse_cleanly_from_many_threads():
    """Objects made with __new__, shared by 8 threads that call their methods
    and close them at once: every call refuses with a clean exception, none
    crashes, and close() stays idempotent."""
    run_hammer("""
        objs = [Stream.__new__(Stream), Event.__new__(Event),
                streams.StreamPool.__new__(streams.StreamPool),
                streams.EventPool.__new__(streams.EventPool),
                streams.DeviceBuffer.__new__(streams.DeviceBuffer),
                streams.MemoryPool.__new__(streams.MemoryPool),
                streams.Graph.__new__(streams.Graph),
                streams.GraphExec.__new__(streams.GraphExec)]
        calls = [
            lambda o: o.close(),
            lambda o: o.closed,
            lambda o: repr(o),
            lambda o: o.query() if hasattr(o, "query") else None,
            lambda o: o.synchronize() if hasattr(o, "synchronize") else None,
            lambda o: o.owner if hasattr(o, "owner") else None,
            lambda o: o.idle if hasattr(o, "idle") else None,
            lambda o: o.handle if hasattr(o, "handle") else None,
        ]
        allowed = ("ValueError", "TypeError", "RuntimeError", "CudaError")

        def work(i, k):
            obj = objs[(i + k) % len(objs)]
            calls[(i * 7 + k) % len(calls)](obj)

        errors = hammer(work, 3000)
        bad = [e for e in errors if not e.startswith(allowed)]
        assert not bad, bad[:5]
        for o in objs:
            o.close()
        print("OK")
    """)


def test_debug_counters_read_from_many_threads():
    """The counters are read while other threads read them and drop
    objects: every read is a complete dict with the same keys, and nothing
    made leaks (the live counts are where they started)."""
    run_hammer("""
        import gc
        first = streams.debug_counters()
        keys = set(first)

        def work(i, k):
            c = streams.debug_counters()
            assert set(c) == keys
            assert all(isinstance(v, (int, bool)) for v in c.values())
            Stream.__new__(Stream)      # made and dropped at once

        errors = hammer(work, 2000)
        assert not errors, errors[:5]
        gc.collect()
        last = streams.debug_counters()
        live = [k for k in keys if k.startswith("live_") and last[k] != first[k]]
        assert not live, [(k, first[k], last[k]) for k in live]
        print("OK")
    """)


def test_imports_of_the_modules_race_cleanly():
    """Eight threads import the package's modules at once, first thing in a
    fresh interpreter: each gets the same, fully initialised modules."""
    result = run_python(textwrap.dedent("""
        import importlib, threading
        names = ["streams", "streams._stream", "streams._memory", "streams._graph",
                 "streams._hostcall", "streams._asyncio", "streams._launch", "streams.testing"]
        got = [None] * 8
        start = threading.Barrier(8)

        def run(i):
            start.wait()
            got[i] = [importlib.import_module(n) for n in names]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert all(g == got[0] for g in got), got
        import streams
        assert streams.Stream.legacy is got[3][1].Stream.legacy
        print("OK")
    """), timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "OK"


def test_free_threaded_flag_matches_the_interpreter():
    """The tests' own idea of the build is the interpreter's."""
    assert FREE_THREADED == bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    if FREE_THREADED:
        assert hasattr(sys, "_is_gil_enabled")
    assert streams.Stream.legacy == streams.Stream.from_handle(1)


@pytest.mark.parametrize("free_threaded_path", [False, True])
def test_refcount_back_counts_the_callers_references(monkeypatch, free_threaded_path):
    """The GPU tests' refcount check, on either of its paths (the polling one
    is taken on free-threaded builds), is true exactly when the caller's
    count is back: its extra frames are not counted as references."""
    monkeypatch.setattr(_support, "FREE_THREADED", free_threaded_path)

    def fn(arg):
        pass

    rc = sys.getrefcount(fn)
    assert refcount_back(fn, rc), (sys.getrefcount(fn), rc)
    held = [fn]
    assert not refcount_back(fn, rc), (sys.getrefcount(fn), rc)
    held.clear()
    assert refcount_back(fn, rc), (sys.getrefcount(fn), rc)


# ---- re-initialisation, lazily published state, doorbells ----------------------------------

def test_a_launch_config_initialised_by_eight_threads_at_once_is_one_of_theirs():
    """Eight threads run __init__ on one LaunchConfig made with __new__, each
    with its own grid, block, shared memory and priority: exactly one wins,
    the others are refused with "already initialised", and every field of
    the config is the winner's (never a mix of two threads' arguments)."""
    run_hammer("""
        from streams import LaunchConfig
        rounds = 300
        configs = [LaunchConfig.__new__(LaunchConfig) for _ in range(rounds)]
        won = [[] for _ in range(rounds)]

        def work(i, k):
            cfg = configs[k]
            try:
                cfg.__init__((i + 1, 2), (32 * (i + 1),), shared_mem=i * 16,
                             cooperative=bool(i % 2), priority=-i,
                             mem_sync_domain="remote" if i % 2 else "default")
            except RuntimeError as exc:
                assert "already initialised" in str(exc), exc
                return
            won[k].append(i)

        errors = hammer(work, rounds)
        assert not errors, errors[:5]
        for cfg, winners in zip(configs, won):
            assert len(winners) == 1, winners
            i = winners[0]
            assert cfg.grid == (i + 1, 2, 1) and cfg.block == (32 * (i + 1), 1, 1), (i, cfg)
            assert cfg.shared_mem == i * 16 and cfg.priority == -i, (i, cfg)
            assert cfg.cooperative == bool(i % 2), (i, cfg)
            assert cfg.mem_sync_domain == ("remote" if i % 2 else "default"), (i, cfg)
        print("OK")
    """)


def test_a_launch_config_whose_init_is_overtaken_publishes_nothing():
    """An __init__ held up inside an argument conversion (a priority whose
    __index__ waits) while another thread's __init__ completes: the late one
    is refused and the config keeps the first one's fields."""
    import threading
    from streams import LaunchConfig

    cfg = LaunchConfig.__new__(LaunchConfig)
    inside, go = threading.Event(), threading.Event()

    class SlowPriority:
        def __index__(self):
            inside.set()
            assert go.wait(10)
            return -7

    errors = []

    def late():
        try:
            cfg.__init__(9, 9, priority=SlowPriority())
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=late)
    t.start()
    assert inside.wait(10)
    cfg.__init__(3, 64, priority=1)
    go.set()
    t.join(10)
    assert len(errors) == 1 and "already initialised" in errors[0], errors
    assert cfg.grid == (3, 1, 1) and cfg.block == (64, 1, 1) and cfg.priority == 1


def test_handle_owner_init_races_refuse_cleanly_and_a_failed_init_gives_its_claim_back():
    """__init__ on one __new__-made object from 8 threads at once, while
    others call its methods: each call either fails as a lone __init__
    would (no GPU here: CudaError; with one, exactly one thread made the
    handle) or is refused with RuntimeError; a failed __init__ leaves the
    object uninitialised, so the next __init__ tries again."""
    run_hammer("""
        from streams import CudaError
        makers = [lambda o: o.__init__(), lambda o: o.__init__(),
                  lambda o: o.__init__(), lambda o: o.__init__(8)]
        classes = [Stream, Event, streams.Graph, streams.PinnedBuffer]
        rounds = 200
        objs = [[cls.__new__(cls) for cls in classes] for _ in range(rounds)]
        made = []
        lock = threading.Lock()

        def work(i, k):
            j = (i + k) % len(classes)
            obj = objs[k][j]
            if i % 4 == 3:
                try:
                    obj.query() if hasattr(obj, "query") else obj.close()
                except ValueError:
                    pass
                return
            try:
                makers[j](obj)
            except CudaError:
                return
            except RuntimeError as exc:
                assert "initialised" in str(exc) or "another thread" in str(exc), exc
                return
            with lock:
                made.append(obj)

        errors = hammer(work, rounds)
        assert not errors, errors[:5]
        # One maker at most per object.
        made_ids = {id(o) for o in made}
        assert len(made) == len(made_ids), len(made)
        for row in objs:
            for j, obj in enumerate(row):
                if id(obj) in made_ids:
                    continue
                assert obj.closed
                try:
                    makers[j](obj)          # the claim was given back
                except CudaError:
                    pass
                else:
                    obj.close()
        for obj in made:
            obj.close()
        print("OK")
    """)


def test_a_green_context_never_initialised_refuses_from_many_threads():
    """A GreenContext made with __new__: 8 threads call create_stream,
    close, repr, device and __init__ with a wrong argument at once; every
    call refuses with its documented error, and a refused __init__ leaves
    the context uninitialised (the next one is refused for its argument
    again, not as a second __init__)."""
    run_hammer("""
        from streams import GreenContext
        ctxs = [GreenContext.__new__(GreenContext) for _ in range(50)]
        calls = [
            lambda c: c.create_stream(),
            lambda c: c.close(),
            lambda c: repr(c),
            lambda c: c.device,
            lambda c: c.closed,
            lambda c: c.sm_count,
            lambda c: c.__init__(1),
            lambda c: c.__enter__(),
        ]
        # The last: an __init__ that meets another thread's __init__ (which
        # is about to fail on its argument) is refused as a second one.
        allowed = ("ValueError: operation on a closed GreenContext",
                   "TypeError: partition must be a streams.SmPartition",
                   "RuntimeError: GreenContext.__init__ may run only once")

        def work(i, k):
            calls[(i * 3 + k) % len(calls)](ctxs[k % len(ctxs)])

        errors = hammer(work, 2000)
        bad = [e for e in errors if not e.startswith(allowed)]
        assert not bad, bad[:5]
        for c in ctxs:
            assert c.closed and repr(c) == "<streams.GreenContext (closed)>"
            try:
                c.__init__(None)
            except TypeError:
                pass
        print("OK")
    """)


def test_doorbells_of_many_loops_swept_while_others_count_them():
    """Eight threads each run event loops that await probe waits rung from
    another thread, then close; others count the waits (_async_waits, which
    sweeps closed loops) at the same time: nothing crashes, every wait
    completes, and once all loops are closed nothing is left."""
    run_hammer("""
        import asyncio
        from streams._asyncio import _async_waits, _probe_wait

        def work(i, k):
            if i % 4 == 0:
                c = _async_waits()
                assert c["waiting"] >= 0 and c["in_flight"] >= 0, c
                return

            async def main():
                pairs = [_probe_wait() for _ in range(4)]
                ringer = threading.Thread(target=lambda: [p.ring() for _, p in pairs])
                ringer.start()
                await asyncio.gather(*(aw for aw, _ in pairs))
                ringer.join()

            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        errors = hammer(work, 40)
        assert not errors, errors[:5]
        assert _async_waits() == {"waiting": 0, "in_flight": 0}, _async_waits()
        print("OK")
    """, timeout=240)


def test_the_callback_thread_keeps_its_thread_state_between_callbacks():
    """CUDA's callback thread makes a Python thread state at its first
    callback and keeps it: on a free-threaded CPython, deleting it after
    each callback cost 394-431 us per callback on an H200 (1.7-2.1 us kept)
    and left several producer threads a backlog that took minutes to drain.
    The trampoline runs here on a thread of its own, without CUDA: a
    ``threading.local`` set by one callback is still there at the next only
    while the thread state lives."""
    code = textwrap.dedent("""
        import threading
        import streams
        local = threading.local()
        seen = []
        def callback(value):
            seen.append((getattr(local, "value", None), threading.get_ident()))
            local.value = value
        streams._hostcall._call_on_a_native_thread(callback, 7, 3)
        assert [v for v, _ in seen] == [None, 7, 7], seen
        assert len({ident for _, ident in seen}) == 1, seen
        assert threading.get_ident() not in {ident for _, ident in seen}
        assert streams.debug_counters()["live_host_calls"] == 0
        print("OK")
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), (
        result.stdout[-2000:], result.stderr[-3000:])


def test_an_object_a_callback_made_is_freed_once_dropped_or_by_a_collection():
    """What the kept thread state means for objects a callback makes and
    another thread lets go of last: with a GIL they are freed at once; on a
    free-threaded CPython they go back to the callback thread (biased
    reference counting), freed when it next runs Python or by the next
    ``gc.collect()`` (docs/safety.rst)."""
    code = textwrap.dedent(f"""
        import gc, weakref
        import streams
        class Made:
            pass
        made, freed = [], []
        streams._hostcall._call_on_a_native_thread(lambda _: made.append(Made()))
        ref = weakref.ref(made[0], lambda _: freed.append(True))
        made.clear()
        assert freed == ([] if {FREE_THREADED!r} else [True]), freed
        gc.collect()
        assert freed == [True] and ref() is None, freed
        print("OK")
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), (
        result.stdout[-2000:], result.stderr[-3000:])


def test_the_private_timing_and_trampoline_hooks_refuse_bad_input():
    """The hooks the tests and benchmarks/probes/quick_timing.py call: clear errors for
    wrong types and values past their C types, and a trampoline call made
    from inside a callback runs on a thread of its own."""
    run = streams._hostcall._call_on_a_native_thread
    with pytest.raises(TypeError, match="callback must be callable"):
        run(1)
    with pytest.raises(ValueError, match="count must be >= 0"):
        run(print, None, -1)
    with pytest.raises(OverflowError):
        run(print, None, 2 ** 31)
    with pytest.raises(ValueError, match="n must be > 0"):
        streams._cudart._nogil_round_trip(0)
    with pytest.raises(TypeError):
        streams._cudart._nogil_round_trip("x")
    with pytest.raises(OverflowError):
        streams._cudart._nogil_round_trip(2 ** 64)
    before = streams.debug_counters()["live_host_calls"]
    seen = []
    run(lambda _: run(seen.append, 1, 2))
    assert seen == [1, 1]
    assert streams.debug_counters()["live_host_calls"] == before

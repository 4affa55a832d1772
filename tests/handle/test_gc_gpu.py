"""Objects in reference cycles, collected by the cyclic GC while the GPU
still works for them.

The GC calls tp_clear on every object of an unreachable cycle; Cython's
tp_clear sets the object fields to None before __dealloc__ runs.  The types
whose teardown needs those fields (executables parking what their replays
use, holds giving back a use, buffers freed on their stream, streams and
events keeping a foreign handle's owner) are no_gc_clear: the GC breaks the
cycle at a list, dict or instance instead, and each streams object goes
through its __dealloc__ whole.

Each scenario runs in a child process (a use after free on the GPU would
poison this process's context) that reports what it saw as JSON.  Each
makes the GC meet the streams objects before the Python containers of the
cycle, the order in which a tp_clear of those types would free or leak
what they hold:
objects a full collection takes first are those of the oldest generation,
then generation 0, then generation 1 (CPython's gc_collect_main merges them
in that order)."""
import json

import pytest

from _support import run_python

pytestmark = pytest.mark.gpu

PRELUDE = '''
import ctypes, gc, json, sys
import numpy as np
import streams
from streams import DeviceBuffer, Event, Graph, MemoryPool, Stream
from streams._launch import builtin_kernel
from streams.testing import spin

N, GRID, BLOCK, MS = 1024, 4, 256, 1000
unraisable = []
sys.unraisablehook = lambda u: unraisable.append(f"{type(u.exc_value).__name__}: {u.exc_value}")
out = {}

def report(**kw):
    out.update(kw)
    print(json.dumps(out), flush=True)

def settle():
    streams.synchronize_device()
    streams._cudart._drain_deferred()
    return streams.debug_counters()

def host_u32(buf, stream):
    h = np.empty(N, dtype=np.uint32)
    streams.memcpy_async(h, buf, stream=stream)
    stream.synchronize()
    return h

class Foreign:
    """Device memory known by address only: a graph node holds this object itself."""
    def __init__(self, buf, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (buf.ptr, False), "version": 3,
                                         "stream": None}

gc.disable()        # no automatic collection reorders the generations
gc.collect()
'''


def run_child(body):
    result = run_python(PRELUDE + body, timeout=90)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    assert result.returncode == 0 and lines, (
        f"child exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return json.loads(lines[-1])


EXEC_IN_A_CYCLE = '''
alloc = Stream(non_blocking=True)   # the buffer's stream, idle: a free there is immediate
busy = Stream(non_blocking=True)    # the replay's, held by a spin
buf = DeviceBuffer(N * 4, stream=alloc)
aux = DeviceBuffer(4, stream=alloc)
alloc.synchronize()
live_before = streams.debug_counters()["live_buffers"]
g = Graph()
g.add_kernel_node("fill_u32", GRID, BLOCK, buf, 0xDEAD, N)
g.add_memset_node(aux, 0, 4)
ex = g.instantiate()
g.close()
del g
gc.collect()        # the executable and its holds: the oldest generation, met first
hook = Foreign(aux, 4)
g2 = Graph()        # same shape; its memset node holds `hook`, which will refer to ex
g2.add_kernel_node("fill_u32", GRID, BLOCK, buf, 0xDEAD, N)
g2.add_memset_node(hook, 0, 4)
report(updated=bool(ex.update(g2).ok))
g2.close()
del g2
hook.ex = ex        # the cycle: ex -> what its replays use -> hook -> ex
spin(busy, 500 * MS)
ex.launch(busy)     # fills buf with 0xDEAD once the spin ends
buf_ptr = buf.ptr
buf.close()         # in use by the executable: freed once its replays ended
del buf, ex, hook
gc.collect()
streams._cudart._drain_deferred()
report(replay_pending=not busy.query(),
       buf_kept=streams.debug_counters()["live_buffers"] == live_before,
       parked=streams._cudart._parked_count())
new = DeviceBuffer(N * 4, stream=alloc)     # the freed block, had buf been freed
alloc.launch(builtin_kernel("fill_u32"), GRID, BLOCK, new, 7, N)
alloc.synchronize()
report(same_block=new.ptr == buf_ptr)
busy.synchronize()  # the replay has run
h = host_u32(new, alloc)
report(new_intact=bool((h == 7).all()), new_values=[int(v) for v in np.unique(h)[:4]])
new.close()
aux.close()
c = settle()
report(buffers_freed=c["live_buffers"] == live_before - 2, execs=c["live_graph_execs"],
       graphs=c["live_graphs"], parked_after=streams._cudart._parked_count(),
       unraisable=unraisable)
alloc.close()
busy.close()
'''


def test_executable_in_a_cycle_keeps_its_buffers_for_replays_in_flight():
    # With tp_clear, the GC would clear the executable's tuple of holds
    # before its __dealloc__ could park it, so the buffer would be freed on
    # its idle stream while the replay still waits behind the spin on
    # another; the next allocation would get the block and the replay
    # overwrite it.
    r = run_child(EXEC_IN_A_CYCLE)
    assert r["updated"], r
    assert r["replay_pending"], r     # the spin held the replay: the check means something
    assert r["new_intact"], r         # no replay wrote into a buffer that reused the block
    assert r["buf_kept"] and r["parked"] >= 1, r
    assert r["buffers_freed"] and r["parked_after"] == 0, r
    assert r["execs"] == 0 and r["graphs"] == 0, r
    assert r["unraisable"] == [], r


BUFFER_IN_A_CYCLE = '''
pool = MemoryPool.default()
real = Stream(non_blocking=True)
real.synchronize()
base_used = pool.used_current
live_before = streams.debug_counters()["live_buffers"]
owner = []
wrap = Stream.from_handle(real.handle, owner=owner, device=real.device_id)

# Where the wrapper keeps its count of buffers (a zero-byte buffer adds one):
# with tp_clear, the free of a zero-byte buffer would decrement the word at
# that offset beside None.
size = type(wrap).__basicsize__ // 4
def words(obj):
    return [ctypes.c_int.from_address(id(obj) + 4 * i).value for i in range(size)]
w0 = words(wrap)
probe = DeviceBuffer(0, stream=wrap)
w1 = words(wrap)
probe.close()
w2 = words(wrap)
del probe
found = [i for i in range(size) if w1[i] == w0[i] + 1 and w2[i] == w0[i]]
beside_none = ctypes.c_int.from_address(id(None) + 4 * found[0]) if len(found) == 1 else None

gc.collect(0)       # owner and wrap move to generation 1: met after the buffers
big = DeviceBuffer(256 << 20, stream=wrap)
zero = DeviceBuffer(0, stream=wrap)
owner += [big, zero]    # the cycles: buffer -> its stream -> the stream's owner -> buffer
wrap.synchronize()
report(used_with=pool.used_current - base_used)
del big, zero, wrap, owner
word_before = beside_none.value if beside_none is not None else None
gc.collect()
word_after = beside_none.value if beside_none is not None else None
c = settle()
report(used_after=pool.used_current - base_used,
       buffers_freed=c["live_buffers"] == live_before, unraisable=unraisable,
       word_beside_none_changed=None if word_before is None else word_after - word_before)
real.close()
'''


def test_buffer_in_a_cycle_is_freed_on_its_stream():
    # With tp_clear, the GC would clear the buffer's stream first; the free
    # would then raise AttributeError (reported as unraisable) and the
    # 256 MiB stay allocated, and the zero-byte buffer would decrement the
    # word beside None where a stream keeps its count of buffers
    # (word_beside_none_changed: -1; reported, not asserted: that word
    # belongs to whatever the interpreter put there).
    r = run_child(BUFFER_IN_A_CYCLE)
    assert r["used_with"] >= 256 << 20, r
    assert r["unraisable"] == [], r
    assert r["used_after"] <= 0, r
    assert r["buffers_freed"], r


EVERY_HOLD_IN_A_CYCLE = '''
pool = MemoryPool.default()
mod = streams.testing.builtin_module()      # counted: its unload is seen
fill = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
real_s = Stream(non_blocking=True)
real_e = Event()
real_s.synchronize()
base_used = pool.used_current
before = streams.debug_counters()
owner_s, owner_e = [], []
ws = Stream.from_handle(real_s.handle, owner=owner_s, device=real_s.device_id)
we = Event.from_handle(real_e.handle, owner=owner_e, device=real_e.device_id)
gc.collect(0)       # the owners and wrappers: generation 1, met after everything below
buf = DeviceBuffer(N * 4, stream=real_s)    # a kernel node's argument (_BufferUses)
held = DeviceBuffer(N * 4, stream=ws)       # a memset node's target (a HandleUse)
g = Graph()
k = g.add_kernel_node(fill, GRID, BLOCK, buf, 5, N)                # a HandleUse of fill's module
m = g.add_memset_node(held, 1, N * 4, dependencies=[k])
g.add_event_record_node(we, dependencies=[m])                      # a HandleUse of we
ex = g.instantiate()
g.close()
del g, k, m
# The cycles: ws -> owner_s -> {held, ex}; held -> ws; ex -> HandleUse -> we
# -> owner_e -> ex; ex -> HandleUse -> held.
owner_s += [held, ex]
owner_e.append(ex)
spin(ws, 500 * MS)
ex.launch(ws)       # writes buf and held, records we, after the spin
mod.close()         # in use by the executable's kernel node: unloaded after
buf.close()
held.close()
del buf, held, ex, ws, we, owner_s, owner_e, fill
mid = streams.debug_counters()
gc.collect()
streams._cudart._drain_deferred()
c = streams.debug_counters()
report(replay_pending=not real_s.query(), parked=streams._cudart._parked_count(),
       kept=[k for k in ("live_buffers", "live_modules") if c[k] != mid[k]])
c = settle()
report(event_reached=real_e.query(),
       leaked=[k for k in ("live_buffers", "live_modules", "live_graphs", "live_graph_execs",
                           "live_streams", "live_events")
               if c[k] != before[k] - (k == "live_modules")],
       used_after=pool.used_current - base_used, parked_after=streams._cudart._parked_count(),
       unraisable=unraisable)
real_s.close()
real_e.close()
'''


def test_every_hold_in_a_cycle_lets_go_after_the_replays():
    # Every no_gc_clear type in one collected cycle: Stream and Event (foreign
    # wrappers whose owners close the cycle), DeviceBuffer, GraphExec and the
    # holds of its nodes (HandleUse, _BufferUses).
    # With tp_clear, the holds would be cleared first and their uses never
    # given back: the closed module would stay loaded and the memset target
    # never be freed (leaked: live_modules, live_buffers; used_after > 0),
    # and the executable be cleared before it could park (parked == 0).
    r = run_child(EVERY_HOLD_IN_A_CYCLE)
    assert r["replay_pending"], r
    assert r["parked"] >= 1 and r["kept"] == [], r    # nothing let go under the replay
    assert r["event_reached"], r
    assert r["leaked"] == [] and r["parked_after"] == 0, r
    assert r["used_after"] <= 0, r
    assert r["unraisable"] == [], r

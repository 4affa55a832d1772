"""streams inside NCCL: nccl4py collectives on a streams Stream, captured
into a streams Graph and replayed, and torch.distributed's NCCL process
group on a streams stream through ``current_in``.  One GPU: single-rank
communicators and world size 1, results checked on the host; ordering is
shown by a spin held before the data is written (a collective on another
stream would read the buffer before it is filled).

nccl4py (and the NCCL library it loads) is a test dependency: carried as a
wheel to a GPU machine without network (docs/contributing.rst)."""
import os

import pytest

import streams
from streams import DeviceBuffer
from streams.testing import fill_u32, spin

from _support import MS, N, to_host

pytestmark = pytest.mark.gpu
np = pytest.importorskip("numpy", reason="the NCCL tests check data with numpy")

NBYTES = 4 * N


def _nccl():
    try:
        import nccl.core as nccl
        nccl.get_unique_id()        # loads libnccl
    except Exception as exc:        # noqa: BLE001 - the reason is the skip's
        pytest.skip(f"nccl4py cannot run here: {type(exc).__name__}: {exc}")
    return nccl


@pytest.fixture
def comm():
    nccl = _nccl()
    c = nccl.Communicator.init(1, 0, nccl.get_unique_id())
    yield nccl, c
    c.destroy()


def test_an_allreduce_runs_in_a_streams_stream_order(comm, stream):
    nccl, c = comm
    send, recv = DeviceBuffer(NBYTES, stream=stream), DeviceBuffer(NBYTES, stream=stream)
    streams.memset_async(recv, 0, stream=stream)
    spin(stream, 50 * MS)
    fill_u32(stream, send, 7, N)          # written after the spin: only in stream order
    c.allreduce(send, recv, nccl.SUM, stream=stream)
    assert (to_host(recv, stream) == 7).all()
    send.close(), recv.close()


def test_a_captured_allreduce_replays_from_a_streams_graph(comm, stream):
    nccl, c = comm
    send, recv = DeviceBuffer(NBYTES, stream=stream), DeviceBuffer(NBYTES, stream=stream)
    stream.synchronize()
    with stream.capture() as cap:
        c.allreduce(send, recv, nccl.SUM, stream=stream)
    graph = cap.graph
    data = graph.to_dict()
    kernels = [n for n in data["nodes"] if n["type"] == "kernel"]
    assert kernels, data["nodes"]
    names = [(n.get("kernel") or {}).get("name") or "" for n in kernels]
    assert any("nccl" in name.lower() for name in names), names
    exe = graph.instantiate()
    for value in (3, 11):
        spin(stream, 20 * MS)
        fill_u32(stream, send, value, N)
        exe.launch(stream)
        assert (to_host(recv, stream) == value).all()
    exe.close(), graph.close()
    send.close(), recv.close()


def test_a_streams_event_marks_the_launch_of_a_collective(comm, stream):
    # nccl4py takes an event as a cuda.core Event or an int cudaEvent_t:
    # a streams Event passes its handle.
    nccl, c = comm
    ev = streams.Event()
    send, recv = DeviceBuffer(NBYTES, stream=stream), DeviceBuffer(NBYTES, stream=stream)
    fill_u32(stream, send, 5, N)
    try:
        cfg = nccl.NCCLCollConfig(launch_completion_event=ev.handle)
        c.allreduce(send, recv, nccl.SUM, stream=stream, config=cfg)
    except (TypeError, ValueError, getattr(nccl, "NcclInvalid", ValueError)) as exc:
        pytest.skip(f"this NCCL cannot signal a launch-completion event: {exc}")
    assert ev.synchronize(timeout=30)
    assert (to_host(recv, stream) == 5).all()
    send.close(), recv.close(), ev.close()


def test_torch_distributed_nccl_runs_on_a_streams_stream(stream, tmp_path):
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL process group")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")      # no NVLink multicast
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        with streams.current_in("torch", stream):
            t = torch.zeros(N, dtype=torch.int32, device="cuda")
            spin(stream, 50 * MS)
            t.fill_(4)                      # on `stream`, after the spin
            dist.all_reduce(t)              # ordered after it, results back on it
            t.add_(1)
        stream.synchronize()
        assert (t.cpu() == 5).all()
    finally:
        dist.destroy_process_group()

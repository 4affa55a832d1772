"""streams inside NCCL: nccl4py collectives on a streams Stream, captured
into a streams Graph and replayed, and torch.distributed's NCCL process
group on a streams stream through ``current_in``.  One GPU: single-rank
communicators and world size 1, results checked on the host; ordering is
shown by a spin held before the data is written (a collective on another
stream would read the buffer before it is filled).

nccl4py (and the NCCL library it loads) is a test dependency: carried as a
wheel to a GPU machine without network (docs/contributing.rst)."""
import os
import subprocess

import pytest

import streams
from streams import DeviceBuffer
from streams.testing import fill_u32, spin

from _support import MS, N, child_python, to_host

pytestmark = pytest.mark.gpu
np = pytest.importorskip("numpy", reason="the NCCL tests check data with numpy")

NBYTES = 4 * N
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")     # no NVLink multicast (read at NCCL's init)
two_gpus = pytest.mark.skipif(streams.device_count() < 2,
                              reason="a two-rank communicator needs two GPUs")


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
    # One rank: NCCL copies send to recv for a sum (ncclLaunchOneRank: a
    # memcpy node, read back here); other reductions launch a kernel.
    copies = [n["params"] for n in data["nodes"] if n["type"] == "memcpy"]
    kernels = [n for n in data["nodes"] if n["type"] == "kernel"]
    assert kernels or any(
        p is not None and (p["src"], p["dst"], p["nbytes"]) == (send.ptr, recv.ptr, NBYTES)
        for p in copies), data["nodes"]
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
    except Exception as exc:    # noqa: BLE001 - only this one means "cannot", below
        # nccl4py's config path calls ncclAllReduceConfig, which older
        # libnccl builds lack.
        if type(exc).__name__ != "FunctionNotFoundError":
            raise
        send.close(), recv.close(), ev.close()
        pytest.skip(f"this NCCL cannot signal a launch-completion event: {exc}")
    assert ev.synchronize(timeout=30)
    assert (to_host(recv, stream) == 5).all()
    send.close(), recv.close(), ev.close()


def test_torch_distributed_nccl_runs_on_a_streams_stream(stream, tmp_path):
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL process group")
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


@two_gpus
def test_a_two_rank_allreduce_in_one_process_on_streams_streams():
    # One communicator per GPU (ncclCommInitAll), each rank's collective on
    # a streams stream of its device, held by a spin before its data is
    # written: the sum is right only if both ran in their stream's order.
    nccl = _nccl()
    comms = nccl.Communicator.init_all(2)
    ss = [streams.Stream(device=d, non_blocking=True) for d in (0, 1)]
    sends = [DeviceBuffer(NBYTES, stream=s) for s in ss]
    recvs = [DeviceBuffer(NBYTES, stream=s) for s in ss]
    try:
        for rank, s in enumerate(ss):
            streams.memset_async(recvs[rank], 0, stream=s)
            spin(s, 30 * MS)
            fill_u32(s, sends[rank], 100 + rank, N)
        with nccl.group():
            for rank, s in enumerate(ss):
                comms[rank].allreduce(sends[rank], recvs[rank], nccl.SUM, stream=s)
        for rank, s in enumerate(ss):
            assert (to_host(recvs[rank], s) == 201).all(), rank
    finally:
        for s in ss:
            s.synchronize()
        for c in comms:
            c.destroy()
        for b in sends + recvs:
            b.close()
        for s in ss:
            s.close()


RANK = """
import faulthandler, json, sys
import numpy as np
import nccl.core as nccl
import streams
from streams import DeviceBuffer
from streams.testing import fill_u32, spin
faulthandler.dump_traceback_later(60, exit=True)     # a stuck rank says where, and ends
rank, n = int(sys.argv[1]), int(sys.argv[3])
streams.set_device(rank)
c = nccl.Communicator.init(2, rank, nccl.UniqueId.from_bytes(bytes.fromhex(sys.argv[2])))
s = streams.Stream(non_blocking=True)
send, recv = DeviceBuffer(4 * n, stream=s), DeviceBuffer(4 * n, stream=s)
streams.memset_async(recv, 0, stream=s)
spin(s, 30_000)
fill_u32(s, send, 10 * (rank + 1), n)
c.allreduce(send, recv, nccl.SUM, stream=s)
out = np.empty(n, dtype=np.uint32)
streams.memcpy_async(out, recv, stream=s)
s.synchronize()
c.destroy()
print("RESULT " + json.dumps(sorted(set(out.tolist()))))
"""


@two_gpus
def test_two_processes_allreduce_on_streams_streams(tmp_path):
    # Two ranks in two processes (one GPU each), the unique id passed on
    # the command line as its bytes.  Each child's output goes to a file
    # (no pipe to fill) and each ends itself after 60 s, well within the
    # suite's per-test timeout; a rank that fails shows its own stderr.
    nccl = _nccl()
    uid = nccl.get_unique_id().as_bytes.hex()
    procs, files = [], []
    try:
        for rank in (0, 1):
            out = open(tmp_path / f"rank{rank}.out", "w")
            err = open(tmp_path / f"rank{rank}.err", "w")
            files += [out, err]
            procs.append(subprocess.Popen(
                **child_python(["-c", RANK, str(rank), uid, str(N)],
                               extra_env={"NCCL_NVLS_ENABLE": "0"}),
                stdout=out, stderr=err))
        for p in procs:
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in files:
            f.close()
    for rank, p in enumerate(procs):
        out = (tmp_path / f"rank{rank}.out").read_text()
        err = (tmp_path / f"rank{rank}.err").read_text()
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err[-3000:]}"
        lines = [line[7:] for line in out.splitlines() if line.startswith("RESULT ")]
        assert lines == ["[30]"], (rank, out[-2000:], err[-2000:])

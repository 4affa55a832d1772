"""Probe: what the driver answers to a change of a kernel node captured on a
green context's stream, in the executable, next to the same change of an
ordinary stream's capture (tests/green/test_green_gpu.py checks that
streams refuses such changes before CUDA).  The driver is called through
ctypes with the node's parameters as it reports them, under the primary or
the node's context, with the function or the library kernel naming the
code.  One line per case:

    python -m benchmarks.probes.probe_green_kernel_args [CRASHES=1]    (on a GPU machine)

What it shows on an H200, driver 580.159.04 (CUDA 13.0): for
the green capture every form is refused (1 = invalid value with the
function; 201 = invalid context with the library kernel, either context
current), and the parameters with the function but no context crash the
driver (not tried here any more: see CRASHES); for the ordinary capture
every form is taken.  So streams refuses such changes before CUDA
(streams/_cudart/kernel_nodes.pxi, kernel_node_context_ok).
"""
import argparse
import ctypes
import faulthandler

import numpy as np

import streams
import streams.testing
from streams import DeviceBuffer, GreenContext, Stream

# The form that killed the process with SIGSEGV inside
# cuGraphExecKernelNodeSetParams for the green capture: the function set and
# no context, what the runtime's setters pass.  Pass CRASHES=1 to try it.
CRASHES = False
N = 256
cu = None       # the driver, loaded by main()


class Params(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (src/kernel_node.h)."""
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("kp", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def exec_set(ex, node, params, push=None):
    if push:
        cu.cuCtxPushCurrent_v2(ctypes.c_void_p(push))
    try:
        return cu.cuGraphExecKernelNodeSetParams_v2(ctypes.c_void_p(ex.handle),
                                                    ctypes.c_void_p(node.handle),
                                                    ctypes.byref(params))
    finally:
        if push:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def case(kind, part):
    ctx = GreenContext(part) if kind == "green" else None
    s = ctx.create_stream() if ctx is not None else Stream(non_blocking=True)
    other = DeviceBuffer(4 * N, s)
    streams.memset_async(other, 0, stream=s)
    out = DeviceBuffer(4 * N, s)
    with s.capture("global") as cap:
        streams.testing.fill_u32(s, out, 7, N)
    graph = cap.graph
    node = next(n for n in graph.nodes if n.type == streams.NodeType.KERNEL)
    ex = graph.instantiate()
    p = Params()
    got = cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node.handle), ctypes.byref(p))
    cur = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(cur))
    print(f"{kind}: get {got}, func {p.func or 0:#x} kern {p.kern or 0:#x} "
          f"ctx {p.ctx or 0:#x} (current {cur.value or 0:#x})", flush=True)
    # New arguments: `other`, 9, N.
    a0, a1, a2 = ctypes.c_uint64(other.ptr), ctypes.c_uint32(9), ctypes.c_uint64(N)
    args = (ctypes.c_void_p * 3)(ctypes.addressof(a0), ctypes.addressof(a1),
                                 ctypes.addressof(a2))
    forms = [("as read", {}), ("kernel, no function", {"func": None})]
    if CRASHES:
        forms.append(("function, no context", {"ctx": None}))
    for label, change in forms:
        for where, push in (("primary current", None), ("node's context pushed", p.ctx)):
            q = Params.from_buffer_copy(p)
            q.kp = ctypes.addressof(args)
            for field, value in change.items():
                setattr(q, field, value)
            print(f"   {label:20} {where:22} -> {exec_set(ex, node, q, push)}", flush=True)
    ex.launch(s)
    host = np.zeros(N, dtype=np.uint32)
    streams.memcpy_async(host, other, stream=s)
    s.synchronize()
    print(f"   after a launch the new target holds {sorted(set(host.tolist()))}", flush=True)
    for obj in (ex, graph, out, other, s) + ((ctx,) if ctx is not None else ()):
        obj.close()


def main(argv=None):
    global CRASHES, cu
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes.probe_green_kernel_args",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("crashes", nargs="?", choices=["CRASHES=1"],
                    help="also try the form that crashed the driver")
    CRASHES = ap.parse_args(argv).crashes is not None
    cu = ctypes.CDLL("libcuda.so.1")
    faulthandler.enable()
    dev = streams.Device(streams.get_device())
    (part,), _ = dev.split_sm(dev.sm_resource().min_partition_size, groups=1)
    for kind in ("green", "ordinary"):
        case(kind, part)


if __name__ == "__main__":
    main()

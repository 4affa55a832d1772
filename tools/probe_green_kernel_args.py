"""Probe: changing the arguments of a kernel node captured on a green
context's stream, in the executable (the fuzzer, seed 1096: invalid
argument).  Prints one line per case; what the driver answers to the same
parameters with the primary or the green context current."""
import ctypes
import faulthandler
import traceback

faulthandler.enable()

import numpy as np

import streams
import streams.testing
from streams import DeviceBuffer, GreenContext, PinnedBuffer, Stream

cu = ctypes.CDLL("libcuda.so.1")


class P(ctypes.Structure):
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("kp", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def current():
    c = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(c))
    return c.value


N = 256
dev = streams.Device(streams.get_device())
r = dev.sm_resource()
(part,), _ = dev.split_sm(r.min_partition_size, groups=1)
ctx = GreenContext(part)
for kind in ("green", "ordinary"):
    for target in ("device", "pinned"):
        for inst in ("plain", "auto_free", "upload"):
            s = ctx.create_stream() if kind == "green" else Stream()
            out = DeviceBuffer(4 * N, s)
            other = DeviceBuffer(4 * N, s) if target == "device" else PinnedBuffer(4 * N)
            s.synchronize()
            s.begin_capture("global")
            streams.testing.fill_u32(s, out, 7, N)
            graph = s.end_capture()
            kw = {"auto_free_on_launch": True} if inst == "auto_free" else \
                {"upload_stream": s} if inst == "upload" else {}
            ex = graph.instantiate(**kw)
            (node,) = [n for n in graph.nodes if n.type == "kernel"]
            print("captured", kind, target, inst, flush=True)
            p = P()
            err = cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node.handle), ctypes.byref(p))
            print("got", err, hex(p.func or 0), hex(p.kern or 0), hex(p.ctx or 0), hex(current() or 0), flush=True)
            head = (f"{kind:8} {target:6} {inst:9} get={err} func={p.func:#x} "
                    f"kern={p.kern or 0:#x} ctx={p.ctx or 0:#x} cur={current() or 0:#x}")
            print("step e1", flush=True)
            e1 = cu.cuGraphExecKernelNodeSetParams_v2(ctypes.c_void_p(ex.handle),
                                                      ctypes.c_void_p(node.handle),
                                                      ctypes.byref(p))
            print("step e2", flush=True)
            e2 = None
            if p.ctx:
                cu.cuCtxPushCurrent_v2(ctypes.c_void_p(p.ctx))
                e2 = cu.cuGraphExecKernelNodeSetParams_v2(ctypes.c_void_p(ex.handle),
                                                          ctypes.c_void_p(node.handle),
                                                          ctypes.byref(p))
                popped = ctypes.c_void_p()
                cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
            print("step e3", flush=True)
            q = P.from_buffer_copy(p)
            q.func = None
            e3 = cu.cuGraphExecKernelNodeSetParams_v2(ctypes.c_void_p(ex.handle),
                                                      ctypes.c_void_p(node.handle),
                                                      ctypes.byref(q)) if q.kern else None
            e4 = "skipped (segfaults in the driver for a green node)"
            a0 = ctypes.c_uint64(other.ptr); a1 = ctypes.c_uint32(9); a2 = ctypes.c_uint64(N)
            kp = (ctypes.c_void_p * 3)(ctypes.addressof(a0), ctypes.addressof(a1),
                                       ctypes.addressof(a2))
            res5 = []
            for label, fnull, cnull in (("fNULL", True, False), ("fNULL+cNULL", True, True)):
                q = P.from_buffer_copy(p)
                q.kp = ctypes.addressof(kp)
                if fnull:
                    q.func = None
                if cnull:
                    q.ctx = None
                cu.cuCtxPushCurrent_v2(ctypes.c_void_p(p.ctx))
                e = cu.cuGraphExecKernelNodeSetParams_v2(ctypes.c_void_p(ex.handle),
                                                         ctypes.c_void_p(node.handle),
                                                         ctypes.byref(q))
                popped = ctypes.c_void_p()
                cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
                res5.append(f"{label} pushed={e}")
                print("   variant", label, e, flush=True)
            print("   pushed-ctx variants:", res5, flush=True)
            print("step streams", flush=True)
            try:
                if kind == "green":
                    raise RuntimeError("skipped")
                ex.set_kernel_node_args(node, {0: other, 1: 9})
                res = "streams OK"
            except Exception as exc:
                res = f"streams {type(exc).__name__}: {exc}"
            print(head, "|", res, f"| raw same params: primary-current={e1} green-pushed={e2} "
                  f"func=NULL={e3} ctx=NULL={e4}", flush=True)
            try:
                ex.launch(s)
                host = np.zeros(N, dtype=np.uint32)
                s.synchronize()
                if target == "device":
                    streams.memcpy_async(host, other, stream=s)
                    s.synchronize()
                else:
                    ctypes.memmove(host.ctypes.data, other.ptr, 4 * N)
                print("   launched; target values", sorted(set(host.tolist())), flush=True)
            except Exception:
                traceback.print_exc()
            ex.close()
            graph.close()
            out.close()
            other.close()
            s.close()
ctx.close()

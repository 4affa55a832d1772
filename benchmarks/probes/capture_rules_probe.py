"""What CUDA allows on one thread while another thread captures a stream in
global mode: each call the package makes when it releases something, made
in this thread's global or relaxed mode, and whether the other thread's
capture survived it.  A probe for the GPU machine (needs cuda-bindings),
not a test: ``python -m benchmarks.probes.capture_rules_probe``.

What it shows on an H200 (driver 580, CUDA 13.0):

* global mode: cudaFreeHost, cudaFree, cudaDeviceSynchronize,
  cudaLibraryUnload, cudaMemPoolDestroy and cudaFreeAsync on the legacy
  stream are refused (cudaErrorStreamCaptureUnsupported) and invalidate
  the other thread's capture;
* relaxed mode: all of them succeed and leave the capture alone, except
  cudaDeviceSynchronize (refused, capture invalidated, in either mode) and
  anything on the legacy stream while the captured stream is a blocking
  one (cudaErrorStreamCaptureImplicit).
"""
import argparse
import threading

import streams
from streams.testing import builtin_module, spin

rt = None       # cuda.bindings' runtime, imported by main()

def capture_around(fn, mode_here, blocking=False):
    other = streams.Stream(non_blocking=not blocking)
    spin(other, 0); other.synchronize()
    begun, done, ended = threading.Event(), threading.Event(), []
    def cap():
        other.begin_capture("global")
        try:
            spin(other, 0); begun.set(); done.wait(10)
        finally:
            try:
                g = other.end_capture(); ended.append("ok"); g.close()
            except streams.CudaError as e:
                ended.append(e.name)
    t = threading.Thread(target=cap); t.start(); begun.wait(10)
    prev = streams.exchange_capture_mode(mode_here)
    try:
        r = fn()
    except Exception as e:
        r = f"{type(e).__name__}: {e}"
    finally:
        streams.exchange_capture_mode(prev)
        done.set(); t.join(10)
    other.close()
    return r, ended[0]

def ptr_free_host():
    err, p = rt.cudaMallocHost(4096)
    def f(): return rt.cudaFreeHost(p)[0].name
    return f
def managed_free():
    err, p = rt.cudaMallocManaged(4096, rt.cudaMemAttachGlobal.value if hasattr(rt.cudaMemAttachGlobal,'value') else 1)
    def f(): return rt.cudaFree(p)[0].name
    return f
def dev_sync(): return rt.cudaDeviceSynchronize()[0].name
def lib_unload():
    m = builtin_module()
    s = streams.Stream()
    buf = streams.DeviceBuffer(4096, s)
    k = m.get_kernel("streams_increment_u32", signature=("pointer", "uint64"))
    s.launch(k, 1, 32, buf, 32)
    s.synchronize()
    def f():
        m.close(); return "closed"
    return f
def lib_unload_raw():
    err, lib = rt.cudaLibraryLoadData(streams.testing.BUILTIN_PTX.encode() + b"\0", None, None, 0, None, None, 0)
    def f(): return rt.cudaLibraryUnload(lib)[0].name
    return f
def legacy_is_capturing(): 
    e, st = rt.cudaStreamIsCapturing(rt.cudaStreamLegacy)
    return e.name, str(st)
def pool_destroy():
    props = rt.cudaMemPoolProps()
    props.allocType = rt.cudaMemAllocationType.cudaMemAllocationTypePinned
    props.location.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
    props.location.id = 0
    e, pool = rt.cudaMemPoolCreate(props)
    def f(): return rt.cudaMemPoolDestroy(pool)[0].name
    return f
def malloc_async_free_legacy():
    e, p = rt.cudaMallocAsync(4096, 0)
    rt.cudaStreamSynchronize(0)
    def f(): return rt.cudaFreeAsync(p, rt.cudaStreamLegacy)[0].name
    return f


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.capture_rules_probe",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    global rt
    from cuda.bindings import runtime as rt
    for mode in ("global", "relaxed"):
        for blocking in (False, True):
            for name, make in [("cudaFreeHost", ptr_free_host), ("cudaFree(managed)", managed_free),
                               ("cudaDeviceSynchronize", lambda: dev_sync),
                               ("Module.close", lib_unload),
                               ("cudaLibraryUnload", lib_unload_raw),
                               ("cudaMemPoolDestroy", pool_destroy),
                               ("IsCapturing(legacy)", lambda: legacy_is_capturing),
                               ("cudaFreeAsync(legacy)", malloc_async_free_legacy)]:
                try:
                    f = make()
                    r, ended = capture_around(f, mode, blocking)
                except Exception as e:
                    r, ended = f"setup {type(e).__name__}: {e}", "?"
                print(f"mode={mode:7s} capturing-stream-blocking={blocking!s:5s} {name:24s} "
                      f"-> {r!s:45s} capture: {ended}", flush=True)
                rt.cudaGetLastError()


if __name__ == "__main__":
    main()

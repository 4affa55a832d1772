# Type stubs for streams._hostcall (streams/_hostcall.pyx): host functions,
# Python callbacks and native functions.  Importing the module registers the
# paths that Stream.launch_host_func, Stream.add_callback and
# Graph.add_host_node use.

from typing import final

@final
class HostCall:
    # The `object` of the sys.unraisablehook report when a host callback
    # raises; its repr names the callback and its stream.  Made by streams
    # and graphs only (the constructor raises TypeError).
    ...

# Private: callback(arg) run count times on a thread Python does not know,
# through the trampoline of CUDA's callback thread (tests, no GPU).
def _call_on_a_native_thread(callback: object, arg: object = None, count: int = 1) -> None: ...
# Private: what launch_host_func makes of a callback (tests).
def _native_host_func(callback: object, arg: object = None, owner: object = None) -> tuple[int, int, object] | None: ...

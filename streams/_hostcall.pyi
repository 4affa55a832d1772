# Type stubs for streams._hostcall (streams/_hostcall.pyx): Python host
# callbacks.  Importing the module registers the paths that
# Stream.launch_host_func, Stream.add_callback and Graph.add_host_node use.

from typing import final

@final
class HostCall:
    # The `object` of the sys.unraisablehook report when a host callback
    # raises; its repr names the callback and its stream.  Made by streams
    # and graphs only (the constructor raises TypeError).
    ...

# Type stubs for streams._handle (streams/_handle.pyx): the base of the
# classes that own a CUDA handle, and the keep-alive that holds one in use.

from typing import Literal, final

from typing_extensions import Self, disjoint_base

@disjoint_base
class HandleOwner:
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

# Made only by the package (keep_in_use): one use of a handle owner, given
# back when it goes.
@final
class HandleUse: ...

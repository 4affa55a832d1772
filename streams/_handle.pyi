# Type stubs for streams._handle (streams/_handle.pyx): the base of the
# classes that own a CUDA handle.

from typing import Literal

from typing_extensions import Self, disjoint_base

@disjoint_base
class HandleOwner:
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

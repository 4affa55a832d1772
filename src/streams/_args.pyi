# Type stubs for streams._args (streams/_args.pyx): the enum base class, and
# the argument types that its checks define for every module.

import enum

from typing_extensions import Self, TypeAlias

# Grid, block and cluster dimensions (as_dim3): an int or a tuple of up to 3 ints.
_Dim: TypeAlias = int | tuple[int] | tuple[int, int] | tuple[int, int, int]

# A base class without members (they are in its subclasses); mypy flags any
# enum of a stub that has none.
class StreamsEnum(enum.IntEnum):  # type: ignore[misc]
    # Members are found by value or by name, in any case (CaptureMode(2),
    # CaptureMode("relaxed"): _missing_ looks names up), and compare equal to
    # their value and to their name in any case (status == "active").
    def __new__(cls, value: int | str) -> Self: ...
    @classmethod
    def _missing_(cls, value: object) -> Self | None: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

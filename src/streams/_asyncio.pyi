# Type stubs for streams._asyncio (streams/_asyncio.pyx): awaiting streams
# and events without blocking the event loop.

from collections.abc import Coroutine
from typing import Any

from streams._stream import Event, Stream

# The coroutine behind Stream.wait_async and Event.wait_async.
def wait_async(obj: Stream | Event) -> Coroutine[Any, Any, None]: ...
# Private: what the doorbells of live loops still track (tests).
def _async_waits() -> dict[str, int]: ...

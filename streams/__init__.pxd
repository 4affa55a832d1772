# `cimport streams` / `from streams cimport Stream, Event` for other Cython
# projects.  Add streams.get_include() to the extension's include_dirs.
from streams._core cimport Stream, Event, streams_stream_t, streams_event_t

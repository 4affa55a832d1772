"""Probes: one-off measurements of streams and of CUDA itself, not rows of
the benchmark table.  Each runs on a GPU machine from a checkout with
streams built in place, as ``python -m benchmarks.probes.NAME`` (``--help``
says what it measures and its options); the C ones say how to compile them.
Every Python probe that times calls in a loop does it with
:func:`benchmarks.timing.median_ns` or :func:`benchmarks.timing.batches_ns`.

* ``status_breakdown`` (with ``status_probe.pyx``): a status or enqueue
  call's time, layer by layer;
* ``host_func_breakdown``, ``host_func_threads_breakdown``,
  ``native_host_breakdown`` (with ``native_wait.c``): where the
  host-function round trip and the 8-thread throughput go;
* ``graph_marks``, ``graph_user_objects``: what an event mark and a CUDA
  user object cost a graph's launches;
* ``quick_timing``: rough per-call timings of the hot paths (and
  ``--summarize`` of ``tools/gpu_bench.sh``'s free-threaded rounds);
* ``queue_depth``, ``probe_callback_backlog``: how deep the driver's queue
  of a stream goes, and how far host callbacks fall behind;
* ``capture_rules_probe``, ``probe_green_kernel_args``, ``capture_race.c``:
  what CUDA allows around a capture and on a green context's graph;
* ``query_state.c``: which first step puts a process's status calls on the
  driver's fast path.
"""

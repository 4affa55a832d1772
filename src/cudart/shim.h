/* Internal C shim of `streams._cudart`, the one module that links the CUDA
 * runtime: the parts that run on threads Python does not own, or before or
 * after the interpreter is usable, and so cannot be written in Cython.
 *
 *  - the guard: the per-thread "inside a host callback" flag (CUDA forbids
 *    CUDA calls there, and one can deadlock the callback thread on itself)
 *    and the fork flag (a child forked after CUDA was initialised must not
 *    touch the inherited, unusable CUDA state);
 *  - the shutdown flag (after Python's atexit ran, callbacks must not enter
 *    the interpreter any more: they leak their payload instead);
 *  - the host-function trampolines CUDA calls on its own thread;
 *  - the deferred releases: a handle whose last reference drops where CUDA
 *    cannot be called (a host callback) is released later, on a safe thread;
 *  - per-thread marker events (wait_stream, foreign streams' orderings);
 *  - one helper thread per device for interruptible device synchronization;
 *  - the handle and reference counters of debug_counters().
 *
 * Included by exactly one translation unit (streams/_cudart.pyx;
 * tests/package/test_layout.py checks it): the parts keep their state `static`.
 * One file a concern, in the order they build on each other. */
#ifndef STREAMS_SHIM_H
#define STREAMS_SHIM_H

#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include "streams/streams.h"
#include "streams/clock.h"
#include "notify.h"

#if defined(__GNUC__)
#define STREAMS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define STREAMS_UNLIKELY(x) (x)
#endif

#include "cudart/guard.h"
#include "cudart/counting.h"
#include "cudart/cleanup.h"
#include "cudart/deferred.h"
#include "cudart/hostfn.h"
#include "cudart/fence.h"
#include "cudart/tickets.h"
#include "cudart/native.h"
#include "cudart/markers.h"
#include "cudart/marks.h"
#include "cudart/devsync.h"
#include "cudart/fork.h"

#endif /* STREAMS_SHIM_H */

# What streams._semaphore shares with the deadlines (streams._deadline): the
# GPU operations on a 64-bit value in registered host memory, made with the
# driver's stream memory operations where the device has them and with a
# one-thread kernel where it does not.

from libc.stdint cimport uint64_t

from streams._stream cimport Stream

# How GPU operations are made: the path the device has, or the one asked.
cdef enum:
    PATH_AUTO = 0
    PATH_MEMOPS = 1
    PATH_KERNEL = 2

# 1 when device `dev` has 64-bit stream memory operations (asked once per
# device), else 0.
cdef int device_has_memops(int dev) except -1

# Write `v` to the mapped address `addr` in `s`'s order (signal), or make
# `s` wait until it is at least `v`.  A mark in `marks` (rt.marks_new) after
# it unless captured, when marks is not NULL.  With refuse_capture: 1, and
# nothing enqueued, when `s` is capturing.
cdef int value_op(Stream s, unsigned long long addr, uint64_t v, bint signal, int path,
                  void* marks, bint refuse_capture) except -1

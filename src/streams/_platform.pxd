# Declarations of the package's header-only C helpers that need neither
# CUDA nor Python: clocks and pauses for the waits (streams/clock.h), and
# the life of an owned handle (streams/handle.h), which every handle owner
# uses and which a project that cimports streams compiles too, and the
# stacks of idle handles of StreamPool and EventPool (streams/pool.h).

cdef extern from "streams/clock.h" nogil:
    long long streams_now_ns()
    void streams_cpu_yield()
    void streams_cpu_relax()
    void streams_sleep_ns(long long ns)

cdef extern from "streams/handle.h" nogil:
    unsigned int STREAMS_H_INERT
    int streams_use_begin(unsigned int* state)
    int streams_use_end(unsigned int* state)
    int streams_close_begin(unsigned int* state)
    int streams_is_closed(const unsigned int* state)
    int streams_closed_now(const unsigned int* state)
    void streams_open(unsigned int* state)
    void streams_mark_bit(unsigned long long* mask, int bit)
    int streams_count_add(int* count, int delta)
    int streams_count_get(const int* count)
    # 1 on a free-threaded CPython (no GIL), 0 otherwise: a C constant, so
    # a branch on it compiles away.
    const bint STREAMS_FREE_THREADED
    void* streams_ptr_load(void* const* p)
    void streams_ptr_store(void** p, void* value)
    int streams_flag_get(const int* flag)
    void streams_flag_set(int* flag, int value)
    int streams_flag_claim(int* flag, int expected, int desired)
    unsigned long long streams_u64_get(const unsigned long long* p)
    void streams_u64_set(unsigned long long* p, unsigned long long value)

cdef extern from "streams/pool.h" nogil:
    ctypedef struct streams_pool:
        pass
    streams_pool* streams_pool_new(size_t cap)
    void streams_pool_ref(streams_pool* p)
    void streams_pool_unref(streams_pool* p)
    void* streams_pool_take(streams_pool* p)
    int streams_pool_put(streams_pool* p, void* h)
    size_t streams_pool_idle(streams_pool* p)
    void streams_pool_close(streams_pool* p)

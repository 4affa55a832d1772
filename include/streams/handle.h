/* The life of a CUDA handle owned by a streams object, as one atomic word.
 *
 * Python threads release the GIL around CUDA calls, and Cython projects call
 * the C-level methods with no GIL at all, so close() in one thread can run
 * while another thread is inside a call that uses the handle.  Every user
 * therefore announces itself (use_begin/use_end) and close() only marks the
 * object closed: whoever finds it closed with no users left (close() itself,
 * or the last user on its way out) is the one that releases the handle, once.
 *
 * Bits: CLOSED (no new users), RELEASED (the release was claimed), and a
 * count of users in the rest.  Header-only and free of CUDA types, so that
 * every module of the package and any project that cimports it can use it.
 * GCC/Clang atomics: the package builds with either. */
#ifndef STREAMS_HANDLE_H
#define STREAMS_HANDLE_H

#define STREAMS_H_CLOSED 1u
#define STREAMS_H_RELEASED 2u
#define STREAMS_H_USER 4u
/* What an object that owns nothing (yet) starts as. */
#define STREAMS_H_INERT (STREAMS_H_CLOSED | STREAMS_H_RELEASED)

/* 0: the handle may be used until streams_use_end; -1: closed.  Either way
 * the caller must call streams_use_end exactly once. */
static inline int streams_use_begin(unsigned int *state) {
    unsigned int old = __atomic_fetch_add(state, STREAMS_H_USER, __ATOMIC_SEQ_CST);
    return (old & STREAMS_H_CLOSED) ? -1 : 0;
}

/* 1 when the caller was the last user of a closed object and must now
 * release the handle; 0 otherwise. */
static inline int streams_use_end(unsigned int *state) {
    unsigned int expected = STREAMS_H_CLOSED;
    if (__atomic_sub_fetch(state, STREAMS_H_USER, __ATOMIC_SEQ_CST) != STREAMS_H_CLOSED)
        return 0;
    return __atomic_compare_exchange_n(state, &expected, STREAMS_H_INERT, 0,
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* 0: it was closed already; 1: closed now with no user: the caller releases;
 * 2: closed now, and the last user to leave releases. */
static inline int streams_close_begin(unsigned int *state) {
    unsigned int expected = STREAMS_H_CLOSED;
    unsigned int old = __atomic_fetch_or(state, STREAMS_H_CLOSED, __ATOMIC_SEQ_CST);
    if (old & STREAMS_H_CLOSED)
        return 0;
    return __atomic_compare_exchange_n(state, &expected, STREAMS_H_INERT, 0,
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ? 1 : 2;
}

static inline int streams_is_closed(const unsigned int *state) {
    return (__atomic_load_n(state, __ATOMIC_ACQUIRE) & STREAMS_H_CLOSED) != 0;
}

/* As streams_is_closed, sequentially consistent: for a look that must be
 * ordered after the caller's own streams_count_add (streams/_stream.pyx,
 * Stream.close and the allocations that count on the stream). */
static inline int streams_closed_now(const unsigned int *state) {
    return (__atomic_load_n(state, __ATOMIC_SEQ_CST) & STREAMS_H_CLOSED) != 0;
}

static inline void streams_open(unsigned int *state) {
    __atomic_store_n(state, 0u, __ATOMIC_RELEASE);
}

/* A pointer that one thread publishes (with the GIL) while others may read
 * it without (a graph executable's marks, read by nogil launches). */
static inline void *streams_ptr_load(void *const *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void streams_ptr_store(void **p, void *value) {
    __atomic_store_n(p, value, __ATOMIC_RELEASE);
}

/* A flag that one thread publishes and others read without a lock: a
 * lazily resolved table's "ready" (the store releases the table written
 * before it, the load acquires it), an "initialised" claim, an event's
 * "recorded".  streams_flag_claim: 1 when *flag went from `expected` to
 * `desired` in this call (one winner among racing threads), 0 otherwise. */
static inline int streams_flag_get(const int *flag) {
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

static inline void streams_flag_set(int *flag, int value) {
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
}

static inline int streams_flag_claim(int *flag, int expected, int desired) {
    return __atomic_compare_exchange_n(flag, &expected, desired, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* A 64-bit value several threads read and replace, where any value some
 * thread stored is a right answer (a stream's count of frees at its last
 * full synchronize): never torn, no order implied. */
static inline unsigned long long streams_u64_get(const unsigned long long *p) {
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void streams_u64_set(unsigned long long *p, unsigned long long value) {
    __atomic_store_n(p, value, __ATOMIC_RELAXED);
}

/* A count that threads change without a common lock (a stream's buffers
 * whose free waits for its work): sequentially consistent, so that a
 * change here and a look at an object's CLOSED bit order against a close()
 * that sets the bit and then reads the count (streams/_memory.pyx). */
static inline int streams_count_add(int *count, int delta) {
    return __atomic_add_fetch(count, delta, __ATOMIC_SEQ_CST);
}

static inline int streams_count_get(const int *count) {
    return __atomic_load_n(count, __ATOMIC_SEQ_CST);
}

/* 1 on a free-threaded CPython (3.13t, no GIL): Cython code asks it where
 * a rule rests on the GIL (the enqueues that keep it, streams/_stream.pyx). */
#ifdef Py_GIL_DISABLED
#define STREAMS_FREE_THREADED 1
#else
#define STREAMS_FREE_THREADED 0
#endif

/* Remember that something (a device index) was used, from any thread. */
static inline void streams_mark_bit(unsigned long long *mask, int bit) {
    /* Looked at first: the bit is almost always set already (every launch
     * marks its device), and a load costs less than a locked OR. */
    if (bit >= 0 && bit < 64
            && !(__atomic_load_n(mask, __ATOMIC_RELAXED) & (1ull << bit)))
        __atomic_fetch_or(mask, 1ull << bit, __ATOMIC_RELAXED);
}

#endif /* STREAMS_HANDLE_H */

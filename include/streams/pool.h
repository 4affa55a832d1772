/* A bounded, thread-safe stack of idle CUDA handles (streams or events of
 * one kind), for StreamPool and EventPool.
 *
 * A handle taken from a pool belongs to the object that wraps it; when that
 * object closes or goes, the handle is put back, or destroyed by the caller
 * when the pool is full or closed.  Objects that may put a handle back keep
 * the pool alive with a reference of their own, counted here, because they
 * may be released on any thread and after the Python pool object is gone.
 *
 * Header-only, free of CUDA and Python (the caller destroys handles through
 * the package's call layer).  GCC/Clang atomics and pthreads. */
#ifndef STREAMS_POOL_H
#define STREAMS_POOL_H

#include <pthread.h>
#include <stdlib.h>

typedef struct streams_pool {
    long refs;              /* atomic: the pool object and each pooled wrapper */
    pthread_mutex_t lock;
    int open;
    size_t len, cap;
    void **idle;
} streams_pool;

/* A new open pool holding up to cap idle handles, with one reference; NULL
 * when out of memory. */
static inline streams_pool *streams_pool_new(size_t cap) {
    streams_pool *p = (streams_pool *)calloc(1, sizeof(streams_pool));
    if (!p)
        return NULL;
    p->idle = (void **)calloc(cap ? cap : 1, sizeof(void *));
    if (!p->idle) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->refs = 1;
    p->open = 1;
    p->cap = cap;
    return p;
}

static inline void streams_pool_ref(streams_pool *p) {
    __atomic_fetch_add(&p->refs, 1, __ATOMIC_RELAXED);
}

/* The last reference frees the pool, which is closed and empty by then
 * (only the pool object closes it, and it holds a reference until then). */
static inline void streams_pool_unref(streams_pool *p) {
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p->idle);
    free(p);
}

/* An idle handle, or NULL when there is none (the caller makes one, or,
 * draining a closed pool, is done). */
static inline void *streams_pool_take(streams_pool *p) {
    void *h = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->len > 0)
        h = p->idle[--p->len];
    pthread_mutex_unlock(&p->lock);
    return h;
}

/* 1: kept for reuse; 0: the pool is full or closed, the caller destroys it. */
static inline int streams_pool_put(streams_pool *p, void *h) {
    int kept = 0;
    pthread_mutex_lock(&p->lock);
    if (p->open && p->len < p->cap) {
        p->idle[p->len++] = h;
        kept = 1;
    }
    pthread_mutex_unlock(&p->lock);
    return kept;
}

static inline size_t streams_pool_idle(streams_pool *p) {
    size_t n;
    pthread_mutex_lock(&p->lock);
    n = p->len;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* Close: no handle is put back any more; the caller then drains the idle
 * ones with streams_pool_take and destroys them. */
static inline void streams_pool_close(streams_pool *p) {
    pthread_mutex_lock(&p->lock);
    p->open = 0;
    pthread_mutex_unlock(&p->lock);
}

#endif /* STREAMS_POOL_H */

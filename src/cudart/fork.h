/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the fork handlers. */
#ifndef STREAMS_CUDART_FORK_H
#define STREAMS_CUDART_FORK_H

/* ---- fork ------------------------------------------------------------------
 * The child gets one thread: locks another thread held at the fork are
 * re-made, the helper threads and callbacks in flight do not exist there. */
static void streams_atfork_prepare(void) {
    pthread_mutex_lock(&streams_deferred_lock);
}

static void streams_atfork_parent(void) {
    pthread_mutex_unlock(&streams_deferred_lock);
}

static void streams_atfork_child(void) {
    int i;
    pthread_mutex_init(&streams_deferred_lock, NULL);
    /* Another thread may have held it at the fork; the child never polls
     * the parent's parked items (CUDA is unusable there) but may park. */
    pthread_mutex_init(&streams_parked_lock, NULL);
    /* The queue of failed releases: its lock may have been held too. */
    streams_cleanup_after_fork_child();
    /* The queued releases name the parent's handles: never run them. */
    streams_deferred = NULL;
    streams_deferred_len = streams_deferred_cap = 0;
    atomic_store(&streams_deferred_pending, 0);
    atomic_store(&streams_trampolines_active, 0);
    for (i = 0; i < STREAMS_MAX_DEVICES; i++) {
        pthread_mutex_init(&streams_devsync[i].lock, NULL);
        pthread_cond_init(&streams_devsync[i].wake, NULL);
        pthread_cond_init(&streams_devsync[i].done, NULL);
        streams_devsync[i].running = 0;
        streams_devsync[i].requested = streams_devsync[i].started = 0;
        streams_devsync[i].finished = 0;
    }
    streams_forked_child = streams_cuda_touched;
}

static int streams_install_fork_handler(void) {
    pthread_once(&streams_devsync_once, streams_devsync_init);
    return pthread_atfork(streams_atfork_prepare, streams_atfork_parent, streams_atfork_child);
}

#endif /* STREAMS_CUDART_FORK_H */

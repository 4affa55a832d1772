/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): device synchronization on a helper thread. */
#ifndef STREAMS_CUDART_DEVSYNC_H
#define STREAMS_CUDART_DEVSYNC_H

/* ---- Device synchronization on a helper thread ---------------------------
 * cudaDeviceSynchronize cannot be interrupted, so one helper thread per
 * device makes the call and waiting threads poll its progress with the GIL
 * released, checking for Ctrl-C between slices.  Requests are numbered: a
 * waiter is done once a synchronize that *started* after its request has
 * finished, so calls that arrive while one runs share the next one, and a
 * waiter that gives up (timeout, Ctrl-C) leaves no thread behind. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int running;                 /* the helper thread exists */
    unsigned long long requested, started, finished;
    long long started_at_ns;     /* when the synchronize in flight began */
    cudaError_t last_error;      /* of the synchronize that finished last */
} streams_devsync_t;

static streams_devsync_t streams_devsync[STREAMS_MAX_DEVICES];
static pthread_once_t streams_devsync_once = PTHREAD_ONCE_INIT;

static void streams_devsync_init(void) {
    int i;
    for (i = 0; i < STREAMS_MAX_DEVICES; i++) {
        pthread_mutex_init(&streams_devsync[i].lock, NULL);
        pthread_cond_init(&streams_devsync[i].wake, NULL);
        pthread_cond_init(&streams_devsync[i].done, NULL);
    }
}

static void *streams_devsync_main(void *arg) {
    int dev = (int)(intptr_t)arg;
    streams_devsync_t *d = &streams_devsync[dev];
    cudaError_t err;
    unsigned long long ticket;
    err = cudaSetDevice(dev);
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (d->started == d->requested)
            pthread_cond_wait(&d->wake, &d->lock);
        ticket = d->requested;
        d->started = ticket;
        d->started_at_ns = streams_now_ns();
        pthread_mutex_unlock(&d->lock);
        if (err == cudaSuccess || err == cudaErrorInvalidDevice)
            err = cudaSetDevice(dev);
        if (err == cudaSuccess)
            err = cudaDeviceSynchronize();
        /* CUDA's per-thread last error of this helper thread is never read. */
        cudaGetLastError();
        pthread_mutex_lock(&d->lock);
        d->finished = ticket;
        d->last_error = err;
        err = cudaSuccess;
        pthread_cond_broadcast(&d->done);
    }
    return NULL;
}

/* Ask for a synchronize of `dev`; returns the ticket to wait for, or 0
 * (with *err set) when the helper thread cannot be started. */
static unsigned long long streams_devsync_request(int dev, cudaError_t *err) {
    streams_devsync_t *d;
    pthread_t thread;
    pthread_attr_t attr;
    unsigned long long ticket;
    *err = cudaSuccess;
    if (dev < 0 || dev >= STREAMS_MAX_DEVICES) {
        *err = cudaErrorInvalidDevice;
        return 0;
    }
    pthread_once(&streams_devsync_once, streams_devsync_init);
    d = &streams_devsync[dev];
    pthread_mutex_lock(&d->lock);
    if (!d->running) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, streams_devsync_main, (void *)(intptr_t)dev) != 0) {
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&d->lock);
            *err = cudaErrorMemoryAllocation;
            return 0;
        }
        pthread_attr_destroy(&attr);
        d->running = 1;
    }
    ticket = ++d->requested;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    return ticket;
}

/* Wait up to `slice_ns` for `ticket`.  1: done (*err: that synchronize's
 * result); 0: not yet.  *in_flight_ns: how long the synchronize that will
 * answer this ticket has been running (0 while it has not started). */
static int streams_devsync_wait(int dev, unsigned long long ticket, long long slice_ns,
                                cudaError_t *err, long long *in_flight_ns) {
    streams_devsync_t *d = &streams_devsync[dev];
    struct timespec until;
    long long deadline_ns;
    int done;
    clock_gettime(CLOCK_REALTIME, &until);
    deadline_ns = (long long)until.tv_sec * 1000000000LL + until.tv_nsec + slice_ns;
    until.tv_sec = deadline_ns / 1000000000LL;
    until.tv_nsec = deadline_ns % 1000000000LL;
    pthread_mutex_lock(&d->lock);
    while (d->finished < ticket) {
        if (pthread_cond_timedwait(&d->done, &d->lock, &until) != 0)
            break;
    }
    done = d->finished >= ticket;
    *err = done ? d->last_error : cudaSuccess;
    *in_flight_ns = (!done && d->started >= ticket) ? streams_now_ns() - d->started_at_ns : 0;
    pthread_mutex_unlock(&d->lock);
    return done;
}

#endif /* STREAMS_CUDART_DEVSYNC_H */

/* The asyncio doorbell: a host function that tells an event loop, without
 * the GIL and without polling, that the work before it on a stream is done.
 *
 * One notifier per event loop: an eventfd the loop watches (add_reader) and
 * a lock-free stack of finished waits.  Each wait is a node that holds a
 * reference on its notifier until its host function has run; the host
 * function pushes the node and rings the eventfd, and the loop takes the
 * whole stack at once.  Whoever drops the last reference (the loop's
 * owner, or a host function running after the loop went away) frees the
 * nodes left and closes the eventfd, so a cancelled or abandoned wait
 * leaves nothing behind once the GPU reaches it, and the eventfd number is
 * never written after it was closed (and perhaps reused). */
#ifndef STREAMS_NOTIFY_H
#define STREAMS_NOTIFY_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#define STREAMS_HAVE_EVENTFD 1
#else
#define STREAMS_HAVE_EVENTFD 0
#endif

struct streams_notifier;

typedef struct streams_wait_node {
    struct streams_wait_node *next;
    struct streams_notifier *notifier;
    unsigned long long token;
} streams_wait_node;

typedef struct streams_notifier {
    _Atomic(streams_wait_node *) done;
    atomic_int refs;
    atomic_long live_nodes;   /* made and not yet freed: the leak check */
    int fd;
} streams_notifier;

static inline streams_notifier *streams_notifier_new(void) {
#if STREAMS_HAVE_EVENTFD
    streams_notifier *n = (streams_notifier *)malloc(sizeof(streams_notifier));
    if (n == NULL)
        return NULL;
    n->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->fd < 0) {
        free(n);
        return NULL;
    }
    atomic_init(&n->done, NULL);
    atomic_init(&n->refs, 1);
    atomic_init(&n->live_nodes, 0);
    return n;
#else
    return NULL;
#endif
}

static inline int streams_notifier_fd(streams_notifier *n) { return n->fd; }

static inline long streams_notifier_live_nodes(streams_notifier *n) {
    return atomic_load(&n->live_nodes);
}

static inline void streams_wait_node_free(streams_wait_node *node) {
    atomic_fetch_sub(&node->notifier->live_nodes, 1);
    free(node);
}

static inline void streams_notifier_unref(streams_notifier *n) {
    streams_wait_node *node, *next;
    if (atomic_fetch_sub(&n->refs, 1) != 1)
        return;
    for (node = atomic_exchange(&n->done, NULL); node != NULL; node = next) {
        next = node->next;
        free(node);
    }
    close(n->fd);
    free(n);
}

/* A wait on `n`, holding a reference on it until its host function ran
 * (or streams_wait_node_abandon, when it could not be enqueued). */
static inline streams_wait_node *streams_wait_node_new(streams_notifier *n,
                                                       unsigned long long token) {
    streams_wait_node *node = (streams_wait_node *)malloc(sizeof(streams_wait_node));
    if (node == NULL)
        return NULL;
    node->next = NULL;
    node->notifier = n;
    node->token = token;
    atomic_fetch_add(&n->refs, 1);
    atomic_fetch_add(&n->live_nodes, 1);
    return node;
}

static inline void streams_wait_node_abandon(streams_wait_node *node) {
    streams_notifier *n = node->notifier;
    streams_wait_node_free(node);
    streams_notifier_unref(n);
}

/* The host function (CUDA's callback thread): no GIL, no CUDA. */
static void streams_notify_host_fn(void *arg) {
    streams_wait_node *node = (streams_wait_node *)arg;
    streams_notifier *n = node->notifier;
    streams_wait_node *head = atomic_load(&n->done);
    uint64_t one = 1;
    ssize_t ignored;
    do {
        node->next = head;
    } while (!atomic_compare_exchange_weak(&n->done, &head, node));
    /* Never blocks (non-blocking eventfd; the counter cannot overflow in
     * practice): a loop that stopped reading cannot stall CUDA's thread. */
    ignored = write(n->fd, &one, sizeof(one));
    (void)ignored;
    streams_notifier_unref(n);
}

/* The finished waits, oldest first; the loop frees each with
 * streams_wait_node_free.  Resets the eventfd before taking the stack, so
 * that a node pushed meanwhile rings it again. */
static inline streams_wait_node *streams_notifier_take(streams_notifier *n) {
    uint64_t count;
    ssize_t ignored = read(n->fd, &count, sizeof(count));
    streams_wait_node *node, *next, *oldest = NULL;
    (void)ignored;
    node = atomic_exchange(&n->done, NULL);
    while (node != NULL) {      /* the stack is newest first */
        next = node->next;
        node->next = oldest;
        oldest = node;
        node = next;
    }
    return oldest;
}

#endif /* STREAMS_NOTIFY_H */

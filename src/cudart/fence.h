/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the capture fence and the one-shot tickets. */
#ifndef STREAMS_CUDART_FENCE_H
#define STREAMS_CUDART_FENCE_H

/* ---- The capture fence and one-shot tickets ------------------------------
 * A one-shot work item (a callback enqueued on a stream that is not being
 * captured) is called once and frees what it carries.  Had a capture begun
 * on its stream between the enqueue's "is this stream capturing?" and
 * cudaLaunchHostFunc, CUDA would put it into the capture's graph instead,
 * to be called on every replay: the second replay would use a freed
 * payload.  And a capture ended (its graph perhaps destroyed) between the
 * same check and the attaching of a graph-owned payload to that graph would
 * hand CUDA a dead graph.  Two defences:
 *
 *  - The fence, per stream: the check and the launch of a one-shot enqueue
 *    on stream S run inside a read hold of S's fence; a capture begun or
 *    ended through streams on S (cudaStreamBeginCapture[ToGraph],
 *    cudaStreamEndCapture) runs inside a write hold of S's fence.  So no
 *    capture that streams starts or ends on S can change S's state in the
 *    middle of an enqueue on S: what the check saw is what the launch gets.
 *    (A host-function launch racing a capture's begin or end on the same
 *    stream crashes the driver: benchmarks/capture_race.c.)  Holds on
 *    different streams never wait for one another: a read hold may block in
 *    the driver for as long as its stream's queue is full, and whatever the
 *    GPU waits for (a host thread about to write a word, a callback) may be
 *    a thread that begins or ends a capture on another stream meanwhile.
 *    Writers first: a stream that threads keep enqueuing host functions on
 *    still lets a capture begin or end on it (with readers first, the
 *    capturing thread of benchmarks/capture_race.c waits for ever).
 *
 *  - The capture lock, one for the process: an enqueue into a capture
 *    attaches a user object to the capture's graph, and CUDA graph objects
 *    are not internally synchronized (two threads attaching to one
 *    capture's graph at once crash in the driver), and the capture must
 *    not end (its graph be destroyed) meanwhile.  So enqueues into a
 *    capture, and every capture's begin and end, take it.  A one-shot
 *    enqueue asks its stream's capture status under it too (inside the
 *    stream's read hold): the end of a capture begun on another stream
 *    also ends the capture of every stream that joined it, and must not
 *    race that question.  It is held only across calls that cannot wait
 *    for the GPU (a launch into a capture queues nothing, a status never
 *    waits), and never while waiting for a stream's fence: the fence comes
 *    first.
 *
 * Nobody waits for either with the GIL held (the callers release it first).
 *
 *  - Tickets, for what the fence cannot see (a capture begun by another
 *    library, or a stream that joins a capture by waiting on an event
 *    recorded in it, while another thread enqueues): a one-shot work item
 *    carries no pointer but a ticket, an index into a table of slots that
 *    is never freed, and the slot's generation.  The first call claims the
 *    ticket (a compare-and-swap of the slot's token) and takes the payload;
 *    any later call with the same ticket (a replay of a graph that captured
 *    the work item behind the enqueue's back) finds the token changed and
 *    does nothing.  Such a callback runs at its first replay only, never
 *    after its payload is gone; a capture of it that is never replayed
 *    keeps its slot and payload for the life of the process.
 *    (Generations are 32 bits: a stale ticket could match again only after
 *    2^32 reuses of its slot, and would then run another pending payload
 *    early, still never a freed one.) */

/* The streams with a hold or a waiting writer: a small table under one
 * mutex that is only ever held for a look-up, never across a CUDA call. */
typedef struct {
    void *stream;
    int readers;            /* read holds now */
    int writer;             /* 1 while a capture begins or ends on it */
    int writers_waiting;    /* writers first: readers wait for these too */
} streams_fence_entry;

static pthread_mutex_t streams_fence_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t streams_fence_cond = PTHREAD_COND_INITIALIZER;
static streams_fence_entry *streams_fence_table = NULL;
static size_t streams_fence_len = 0, streams_fence_cap = 0;
static pthread_mutex_t streams_capture_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry of `stream`, made if `make`; NULL if absent (or out of memory,
 * which the caller treats as "wait and try again"). */
static streams_fence_entry *streams_fence_find(void *stream, int make) {
    size_t i;
    for (i = 0; i < streams_fence_len; i++)
        if (streams_fence_table[i].stream == stream)
            return &streams_fence_table[i];
    if (!make)
        return NULL;
    if (streams_fence_len == streams_fence_cap) {
        size_t cap = streams_fence_cap ? 2 * streams_fence_cap : 16;
        streams_fence_entry *t = (streams_fence_entry *)realloc(
            streams_fence_table, cap * sizeof(streams_fence_entry));
        if (t == NULL)
            return NULL;
        streams_fence_table = t;
        streams_fence_cap = cap;
    }
    streams_fence_table[streams_fence_len].stream = stream;
    streams_fence_table[streams_fence_len].readers = 0;
    streams_fence_table[streams_fence_len].writer = 0;
    streams_fence_table[streams_fence_len].writers_waiting = 0;
    return &streams_fence_table[streams_fence_len++];
}

static void streams_fence_forget_if_idle(streams_fence_entry *e) {
    if (e->readers == 0 && e->writer == 0 && e->writers_waiting == 0)
        *e = streams_fence_table[--streams_fence_len];
}

/* Waits for a change of the table, its lock held: for a hold to end, or,
 * when the table could not grow (out of memory), for a millisecond at most
 * before the caller tries again. */
static void streams_fence_wait(int out_of_memory) {
    struct timespec ts;
    if (!out_of_memory) {
        pthread_cond_wait(&streams_fence_cond, &streams_fence_lock);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&streams_fence_cond, &streams_fence_lock, &ts);
}

/* A read hold of `stream`'s fence. */
static void streams_fence_enter(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_lock(&streams_fence_lock);
    for (;;) {
        e = streams_fence_find(stream, 1);
        if (e != NULL && e->writer == 0 && e->writers_waiting == 0)
            break;
        streams_fence_wait(e == NULL);
    }
    e->readers++;
    pthread_mutex_unlock(&streams_fence_lock);
}

static void streams_fence_leave(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_lock(&streams_fence_lock);
    e = streams_fence_find(stream, 0);
    if (e != NULL) {
        e->readers--;
        streams_fence_forget_if_idle(e);
    }
    pthread_cond_broadcast(&streams_fence_cond);
    pthread_mutex_unlock(&streams_fence_lock);
}

/* A write hold of `stream`'s fence (a capture beginning or ending on it),
 * then the capture lock. */
static void streams_fence_close(void *stream) {
    streams_fence_entry *e;
    int waiting = 0;
    pthread_mutex_lock(&streams_fence_lock);
    for (;;) {
        e = streams_fence_find(stream, 1);
        if (e != NULL && !waiting) {
            e->writers_waiting++;
            waiting = 1;
        }
        if (e != NULL && e->readers == 0 && e->writer == 0)
            break;
        streams_fence_wait(e == NULL);
    }
    e->writers_waiting--;
    e->writer = 1;
    pthread_mutex_unlock(&streams_fence_lock);
    pthread_mutex_lock(&streams_capture_lock);
}

static void streams_fence_open(void *stream) {
    streams_fence_entry *e;
    pthread_mutex_unlock(&streams_capture_lock);
    pthread_mutex_lock(&streams_fence_lock);
    e = streams_fence_find(stream, 0);
    if (e != NULL) {
        e->writer = 0;
        streams_fence_forget_if_idle(e);
    }
    pthread_cond_broadcast(&streams_fence_cond);
    pthread_mutex_unlock(&streams_fence_lock);
}

/* The capture lock alone: an enqueue into a capture. */
static inline void streams_capture_enter(void) { pthread_mutex_lock(&streams_capture_lock); }
static inline void streams_capture_leave(void) { pthread_mutex_unlock(&streams_capture_lock); }

/* How many streams have a hold or a waiting writer now (tests). */
static inline size_t streams_fence_streams_now(void) {
    size_t n;
    pthread_mutex_lock(&streams_fence_lock);
    n = streams_fence_len;
    pthread_mutex_unlock(&streams_fence_lock);
    return n;
}

#define STREAMS_TICKET_CHUNK 1024u
#define STREAMS_TICKET_CHUNKS 4096u     /* about 4 million one-shots pending at once */
#define STREAMS_TICKET_NONE 0xFFFFFFFFu
_Static_assert(sizeof(void *) >= 8, "a ticket travels as a host function's void *");

typedef struct {
    atomic_ullong token;    /* the ticket that may claim the slot now; 0: free */
    void *payload;
    unsigned int generation;
    unsigned int next_free;
} streams_ticket_slot;

static _Atomic(streams_ticket_slot *) streams_ticket_chunks[STREAMS_TICKET_CHUNKS];
static pthread_mutex_t streams_ticket_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int streams_ticket_free = STREAMS_TICKET_NONE;
static unsigned int streams_ticket_made = 0;   /* slots made so far */
static atomic_llong streams_tickets_pending = 0;
static atomic_ullong streams_tickets_stale = 0;

static inline streams_ticket_slot *streams_ticket_slot_at(unsigned int index) {
    streams_ticket_slot *chunk;
    if (index / STREAMS_TICKET_CHUNK >= STREAMS_TICKET_CHUNKS)
        return NULL;
    chunk = atomic_load_explicit(&streams_ticket_chunks[index / STREAMS_TICKET_CHUNK],
                                 memory_order_acquire);
    return chunk ? &chunk[index % STREAMS_TICKET_CHUNK] : NULL;
}

/* A ticket for `payload` (never 0), or 0 when out of memory or slots.
 * Any thread, GIL or not. */
static unsigned long long streams_ticket_new(void *payload) {
    streams_ticket_slot *slot = NULL;
    unsigned int index;
    unsigned long long token;
    pthread_mutex_lock(&streams_ticket_lock);
    if (streams_ticket_free != STREAMS_TICKET_NONE) {
        index = streams_ticket_free;
        slot = streams_ticket_slot_at(index);
        streams_ticket_free = slot->next_free;
    } else if (streams_ticket_made / STREAMS_TICKET_CHUNK < STREAMS_TICKET_CHUNKS) {
        index = streams_ticket_made;
        if (index % STREAMS_TICKET_CHUNK == 0) {
            streams_ticket_slot *chunk = (streams_ticket_slot *)calloc(
                STREAMS_TICKET_CHUNK, sizeof(streams_ticket_slot));
            if (chunk == NULL) {
                pthread_mutex_unlock(&streams_ticket_lock);
                return 0;
            }
            atomic_store_explicit(&streams_ticket_chunks[index / STREAMS_TICKET_CHUNK], chunk,
                                  memory_order_release);
        }
        streams_ticket_made++;
        slot = streams_ticket_slot_at(index);
    } else {
        pthread_mutex_unlock(&streams_ticket_lock);
        return 0;
    }
    if (++slot->generation == 0)
        slot->generation = 1;   /* a ticket is never 0 */
    token = ((unsigned long long)slot->generation << 32) | index;
    slot->payload = payload;
    atomic_store_explicit(&slot->token, token, memory_order_release);
    pthread_mutex_unlock(&streams_ticket_lock);
    atomic_fetch_add_explicit(&streams_tickets_pending, 1, memory_order_relaxed);
    return token;
}

/* The payload of `token`, whose slot is free again; NULL when the ticket
 * was claimed before (a replay of a one-shot captured behind our back) or
 * was never issued.  Any thread, GIL or not. */
static void *streams_ticket_take(unsigned long long token) {
    streams_ticket_slot *slot = streams_ticket_slot_at((unsigned int)(token & 0xFFFFFFFFu));
    unsigned long long expected = token;
    void *payload;
    if (slot == NULL || token == 0
        || !atomic_compare_exchange_strong(&slot->token, &expected, 0)) {
        atomic_fetch_add_explicit(&streams_tickets_stale, 1, memory_order_relaxed);
        return NULL;
    }
    payload = slot->payload;
    slot->payload = NULL;
    pthread_mutex_lock(&streams_ticket_lock);
    slot->next_free = streams_ticket_free;
    streams_ticket_free = (unsigned int)(token & 0xFFFFFFFFu);
    pthread_mutex_unlock(&streams_ticket_lock);
    atomic_fetch_sub_explicit(&streams_tickets_pending, 1, memory_order_relaxed);
    return payload;
}

static inline long long streams_tickets_pending_now(void) {
    return atomic_load(&streams_tickets_pending);
}
static inline unsigned long long streams_tickets_stale_calls(void) {
    return atomic_load(&streams_tickets_stale);
}

/* cudaHostFn_t: a one-shot payload, by ticket, consumed by the call. */
static void CUDART_CB streams_host_fn_trampoline(void *ticket) {
    void *payload = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    if (payload != NULL)
        streams_run_payload(payload, 0, 1);
}

/* cudaStreamCallback_t: a one-shot payload, by ticket, with CUDA's status.
 * (CUDA refuses to capture stream callbacks; the ticket costs nothing.) */
static void CUDART_CB streams_stream_callback_trampoline(cudaStream_t stream,
                                                         cudaError_t status, void *ticket) {
    void *payload = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    (void)stream;
    if (payload != NULL)
        streams_run_payload(payload, (int)status, 1);
}

/* cudaHostFn_t of the asyncio doorbell (src/notify.h): a wait node, by
 * ticket, rung once. */
static void CUDART_CB streams_notify_ticket_fn(void *ticket) {
    void *node = streams_ticket_take((unsigned long long)(uintptr_t)ticket);
    if (node != NULL)
        streams_notify_host_fn(node);
}

/* cudaHostFn_t for graph nodes: the payload is owned by a CUDA user object
 * and may run on every replay, so the call does not consume it. */
static void CUDART_CB streams_graph_host_fn_trampoline(void *payload) {
    streams_run_payload(payload, 0, 0);
}

/* cudaHostFn_t destructor of a user object, called on a CUDA thread
 * possibly while a Python thread holds the GIL and waits on CUDA: taking
 * the GIL here could deadlock, so the reference is only queued. */
static void CUDART_CB streams_user_object_release(void *payload) {
    if (!streams_interpreter_alive()) {
        streams_count(STREAMS_CNT_PAYLOAD_LEAKED);
        return;  /* the process is ending: leak rather than touch Python */
    }
    streams_defer(NULL, NULL, 0, (PyObject *)payload);
}

#endif /* STREAMS_CUDART_FENCE_H */

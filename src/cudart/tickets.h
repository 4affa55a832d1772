/* Part of the C shim of streams._cudart (src/cudart/shim.h includes the
 * parts in order; not included on its own): the one-shot tickets. */
#ifndef STREAMS_CUDART_TICKETS_H
#define STREAMS_CUDART_TICKETS_H

/* ---- One-shot tickets --------------------------------------------------
 * For what the capture fence (src/cudart/fence.h) cannot see (a capture begun by another
 * library, or a stream that joins a capture by waiting on an event
 * recorded in it, while another thread enqueues): a one-shot work item
 * carries no pointer but a ticket, an index into a table of slots that
 * is never freed, and the slot's generation.  The first call claims the
 * ticket (a compare-and-swap of the slot's token) and takes the payload;
 * any later call with the same ticket (a replay of a graph that captured
 * the work item behind the enqueue's back) finds the token changed and
 * does nothing.  Such a callback runs at its first replay only, never
 * after its payload is gone; a capture of it that is never replayed
 * keeps its slot and payload for the life of the process.
 * (Generations are 32 bits: a stale ticket could match again only after
 * 2^32 reuses of its slot, and would then run another pending payload
 * early, still never a freed one.) */
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

#endif /* STREAMS_CUDART_TICKETS_H */

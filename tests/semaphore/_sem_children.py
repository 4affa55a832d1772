"""The child processes of the semaphore tests (multiprocessing, spawn): a
module of their own, so that a child imports this and streams, not a test
module.  Each reports through its pipe; a child that can crash or hang runs
here, never in the test process."""
import os
import time


def export_then_exit(conn, initial, linger):
    """Make a semaphore at `initial`, send its descriptor, wait for "go",
    then stay `linger` seconds (signalled to initial + 1 meanwhile, after
    "signal") and end without closing it."""
    import streams
    sem = streams.TimelineSemaphore(initial)
    conn.send(sem.export())
    while True:
        word = conn.recv()
        if word == "signal":
            sem.signal_host(initial + 1)
            conn.send("signalled")
        elif word == "go":
            break
    time.sleep(linger)
    os._exit(0)


def import_and_signal(desc, values, conn):
    """Import `desc`, raise it to each of `values` on the host, report the
    counter seen at the end."""
    import streams
    sem = streams.TimelineSemaphore.import_(desc)
    try:
        for v in values:
            sem.signal_host(v)
        conn.send(("done", sem.value, sem.exporter_pid))
    except BaseException as exc:          # reported, not lost in the child
        conn.send(("error", repr(exc)))
    finally:
        sem.close()


def import_and_wait(desc, value, timeout, conn):
    """Import `desc` and wait on the host for `value`; report what happened."""
    import streams
    sem = streams.TimelineSemaphore.import_(desc)
    t0 = time.monotonic()
    try:
        ok = sem.wait_host(value, timeout=timeout)
        conn.send(("waited", ok, time.monotonic() - t0))
    except streams.SemaphoreAbandoned as exc:
        conn.send(("abandoned", exc.reason, time.monotonic() - t0))
    except BaseException as exc:
        conn.send(("error", repr(exc), time.monotonic() - t0))
    finally:
        sem.close()


# ---- GPU children -------------------------------------------------------------------------
# A producer and a consumer on one GPU, each talking to the test process
# (which passes the producer's pool descriptor on to the consumer).

def gpu_producer(conn, rounds, elems, path, spin_us):
    """Export two semaphores ("full", "free") and an IPC pool buffer; for each
    round i: wait for free >= i - 1, fill the buffer with i, signal full = i,
    all stream-ordered.  With `spin_us`, each round also spins that long (a
    slow producer, for the kill test).  Sends ("ready", full, free, buffer,
    pid) and the pool's descriptor, waits for "go", runs, sends ("done",
    finished), waits for "bye"."""
    from multiprocessing.reduction import send_handle

    import streams
    from streams.testing import fill_u32, spin
    s = streams.Stream(non_blocking=True)
    pool = streams.MemoryPool(ipc=True)
    full = streams.TimelineSemaphore(path=path)
    free = streams.TimelineSemaphore(path=path)
    buf = pool.allocate(elems * 4, s)
    # Everything that loads or registers before any wait can block: a
    # module load or a registration while a stream waits for another
    # process could wait for that stream (Stream.wait_value).
    fill_u32(s, buf.ptr, 0, elems)
    spin(s, 1)
    full.wait(s, 0)
    free.wait(s, 0)
    s.synchronize()
    fd = pool.export_handle()
    conn.send(("ready", full.export(), free.export(), buf.export(), os.getpid()))
    send_handle(conn, fd, os.getppid())
    os.close(fd)
    assert conn.recv() == "go"
    for i in range(1, rounds + 1):
        free.wait(s, i - 1)
        if spin_us:
            spin(s, spin_us)
        fill_u32(s, buf.ptr, i, elems)
        full.signal(s, i)
    finished = s.synchronize(timeout=120)
    conn.send(("done", finished))
    assert conn.recv() == "bye"
    buf.close(s)
    s.synchronize()
    for obj in (full, free, pool, s):
        obj.close()


def gpu_consumer(conn, rounds, elems, wait_timeout):
    """Get the producer's message and pool descriptor from the test
    process; import the semaphores and the buffer; for each round i: wait
    for full >= i, copy the buffer into row i of a results buffer, signal
    free = i.  Then wait on the host for the last round (or for the
    producer's death), check that its stream is not left blocked, and send
    ("result", outcome, seconds, unblocked, rows)."""
    from multiprocessing.reduction import recv_handle

    import numpy as np

    import streams
    _, full_d, free_d, buf_d, _ = conn.recv()
    fd = recv_handle(conn)
    s = streams.Stream(non_blocking=True)
    pool = streams.MemoryPool.import_handle(fd)
    os.close(fd)
    buf = pool.import_buffer(buf_d, stream=s)
    full = streams.TimelineSemaphore.import_(full_d)
    free = streams.TimelineSemaphore.import_(free_d)
    row = elems * 4
    results = streams.DeviceBuffer(rounds * row, stream=s)
    streams.memset_async(results, 0xFF, stream=s)
    full.wait(s, 0)                      # registers both pages before any wait blocks
    free.wait(s, 0)
    s.synchronize()
    conn.send("imported")
    t0 = time.monotonic()
    for i in range(1, rounds + 1):
        full.wait(s, i)
        streams.memcpy_async(results.ptr + (i - 1) * row, buf, row, stream=s)
        free.signal(s, i)
    try:
        outcome = ("waited", full.wait_host(rounds, timeout=wait_timeout))
    except streams.SemaphoreAbandoned as exc:
        outcome = ("abandoned", exc.reason)
    waited_s = time.monotonic() - t0
    # Whatever became of the producer, this stream is not left blocked.
    unblocked = s.synchronize(timeout=30)
    host = np.empty(rounds * elems, dtype=np.uint32)
    if unblocked:
        streams.memcpy_async(host, results, stream=s)
        s.synchronize()
    conn.send(("result", outcome, waited_s, unblocked, host.reshape(rounds, elems)))
    buf.close(s)
    s.synchronize()
    for obj in (results, full, free, pool, s):
        obj.close()

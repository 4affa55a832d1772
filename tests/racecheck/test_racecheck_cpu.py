"""The race checker's model (src/streams/_racecheck.py) without a GPU: each
program is written twice, once with the ordering CUDA needs and once
without it; the checker must report the second (naming both operations)
and stay silent on the first."""
import threading
import warnings

import pytest

from _support import in_threads

from streams._racecheck import HOST, LEGACY, Model, RaceError, RaceWarning

S1, S2, S3 = "s1", "s2", "s3"
BUF, OTHER = "buf", "other"


def _model(*blocking, nonblocking=()):
    m = Model()
    for s in blocking:
        m.stream(s)
    for s in nonblocking:
        m.stream(s, blocking=False)
    return m


def test_a_read_on_another_stream_without_a_wait_is_reported():
    m = _model(S1, S2)
    m.write(BUF, S1, "kernel fill")
    (race,) = m.read(BUF, S2, "memcpy to host")
    assert race.kind == "read after write"
    assert (race.first.op, race.first.stream) == ("kernel fill", S1)
    assert (race.second.op, race.second.stream) == ("memcpy to host", S2)
    text = str(race)
    assert "kernel fill" in text and "memcpy to host" in text and "'s1'" in text
    # Where each was enqueued: this file.
    assert race.first.stack and race.first.stack[-1].filename == __file__
    assert m.races == [race]


def test_the_same_read_after_a_wait_is_silent():
    m = _model(S1, S2)
    m.write(BUF, S1, "kernel fill")
    m.record("e", S1)
    m.wait(S2, "e")
    assert m.read(BUF, S2) == []
    assert m.races == []


def test_an_event_recorded_before_the_write_does_not_order_it():
    # cudaStreamWaitEvent waits for the record, not for what follows it.
    m = _model(S1, S2)
    m.record("e", S1)
    m.write(BUF, S1)
    m.wait(S2, "e")
    assert [r.kind for r in m.read(BUF, S2)] == ["read after write"]


def test_a_wait_takes_the_last_record_at_the_time_of_the_wait():
    m = _model(S1, S2)
    m.write(BUF, S1)
    m.record("e", S1)
    m.wait(S2, "e")          # after the write
    m.record("e", S1)        # recorded again later: the wait already took its position
    assert m.read(BUF, S2) == []
    # An event never recorded orders nothing.
    m2 = _model(S1, S2)
    m2.write(BUF, S1)
    m2.wait(S2, "never recorded")
    assert len(m2.read(BUF, S2)) == 1


def test_order_is_transitive_through_several_streams():
    m = _model(S1, S2, S3)
    m.write(BUF, S1)
    m.record("e1", S1)
    m.wait(S2, "e1")
    m.record("e2", S2)
    m.wait(S3, "e2")
    assert m.read(BUF, S3) == []


def test_a_write_after_reads_on_other_streams_needs_both_waits():
    m = _model(S1, S2, S3)
    m.write(BUF, S1)
    m.sync_stream(S1)
    m.read(BUF, S2, "read a")
    m.read(BUF, S3, "read b")
    m.record("e2", S2)
    m.wait(S1, "e2")                    # waits for S2's read only
    races = m.write(BUF, S1, "overwrite")
    assert [(r.kind, r.first.op) for r in races] == [("write after read", "read b")]
    m.record("e3", S3)
    m.wait(S1, "e3")
    assert m.write(BUF, S1, "overwrite again") == []


def test_host_synchronization_orders_later_enqueues():
    m = _model(S1, S2)
    m.write(BUF, S1)
    m.sync_stream(S2)                   # the wrong stream
    assert len(m.read(BUF, S2)) == 1
    m = _model(S1, S2)
    m.write(BUF, S1)
    m.sync_stream(S1)
    assert m.read(BUF, S2) == []
    m = _model(S1, S2)
    m.write(BUF, S1)
    m.record("e", S1)
    m.sync_event("e")
    assert m.read(BUF, S2) == []
    m = _model(S1, S2)
    m.write(BUF, S1)
    m.sync_device()
    assert m.read(BUF, S2) == []


def test_host_accesses_follow_the_same_rules():
    m = _model(S1)
    m.write(BUF, S1, "kernel")
    assert [r.kind for r in m.read(BUF, HOST, "numpy read")] == ["read after write"]
    m = _model(S1)
    m.write(BUF, S1, "kernel")
    m.sync_stream(S1)
    assert m.read(BUF, HOST) == []
    m.write(BUF, HOST, "host write")    # a later enqueue comes after it
    assert m.read(BUF, S1) == []


def test_the_legacy_stream_orders_blocking_streams_only():
    m = _model(S1, nonblocking=[S3])
    m.write(BUF, S1)
    assert m.read(BUF, LEGACY) == []            # after every blocking stream's work
    m.write(OTHER, LEGACY)
    assert m.read(OTHER, S1) == []              # a blocking stream comes after it
    assert len(m.read(OTHER, S3)) == 1          # a non-blocking one does not
    m2 = _model(nonblocking=[S3])
    m2.write(BUF, S3)
    assert len(m2.read(BUF, LEGACY)) == 1


def test_a_stream_ordered_allocation_and_free_are_writes():
    m = _model(S1, S2)
    m.alloc(BUF, S1, "malloc_async")
    (race,) = m.write(BUF, S2, "kernel")
    assert race.first.op == "malloc_async"
    # A free on one stream while another still reads.
    m = _model(S1, S2)
    m.alloc(BUF, S1)
    m.sync_stream(S1)
    m.read(BUF, S2, "kernel reads")
    (race,) = m.free(BUF, S1, "free_async")
    assert (race.kind, race.first.op, race.second.op) == ("write after read", "kernel reads",
                                                         "free_async")
    # Freed, the key starts afresh (an address used again).
    assert m.alloc(BUF, S2) == []
    m = _model(S1, S2)
    m.alloc(BUF, S1)
    m.sync_stream(S1)
    m.read(BUF, S2)
    m.record("e", S2)
    m.wait(S1, "e")
    assert m.free(BUF, S1) == []


def test_one_stream_never_races_with_itself():
    m = _model(S1)
    for i in range(50):
        assert m.write(BUF, S1) == [] and m.read(BUF, S1) == []
    assert m.free(BUF, S1) == []


def test_modes_warn_and_raise():
    m = Model(mode="raise")
    m.write(BUF, S1, "producer")
    with pytest.raises(RaceError, match="producer") as info:
        m.read(BUF, S2, "consumer")
    assert info.value.race.second.op == "consumer" and m.races == [info.value.race]
    m = Model(mode="warn")
    m.write(BUF, S1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        m.read(BUF, S2)
    assert [w.category for w in seen] == [RaceWarning]
    with pytest.raises(ValueError, match="mode"):
        Model(mode="loud")


def test_threads_with_their_own_streams_and_buffers_report_nothing():
    # Eight threads, each a producer stream and a consumer stream ordered by
    # an event, all on one model at once: no false report, no lost update.
    m = Model(stack_depth=0)

    def work(i):
        p, c, buf, ev = f"p{i}", f"c{i}", f"b{i}", f"e{i}"
        for k in range(300):
            m.write(buf, p)
            m.record(ev, p)
            m.wait(c, ev)
            m.read(buf, c)
            m.record(ev, c)
            m.wait(p, ev)

    errors = in_threads(work, 8)
    assert errors == [] and m.races == []
    # The same with the consumer's wait left out in one thread: reported.
    m.write("b0", "p0")
    assert len(m.read("b0", "c0")) == 1


def test_disjoint_byte_ranges_of_one_buffer_do_not_conflict():
    m = _model(S1, S2)
    m.write(BUF, S1, "first half", 0, 512)
    assert m.write(BUF, S2, "second half", 512, 1024) == []
    (race,) = m.read(BUF, S2, "last bytes of the first half", 500, 600)
    assert race.first.op == "first half" and "[500, 600)" in str(race)
    # The whole buffer (hi None) overlaps every range.
    assert [r.first.op for r in m.write(BUF, S3, "memset")] == [
        "first half", "second half", "last bytes of the first half"]


def test_a_bad_byte_range_is_refused():
    m = _model(S1)
    with pytest.raises(ValueError, match="range"):
        m.read(BUF, S1, "x", 10, 5)
    with pytest.raises(ValueError, match="range"):
        m.read(BUF, S1, "x", -1, 5)


def test_what_the_host_saw_complete_is_forgotten():
    m = _model(S1, S2)
    m.write(BUF, S1, "fill")
    m.sync_stream(S1)
    assert m.read(BUF, S2) == []
    # Only the read on S2 is left to race with.
    assert [a.op for _, a in m._buffers[BUF]] == ["read"]


def test_accesses_kept_per_buffer_are_bounded():
    from streams._racecheck import MAX_ACCESSES
    m = _model(S1, nonblocking=(S2,))
    for i in range(MAX_ACCESSES + 50):
        m.read(BUF, S1 if i % 2 else S2, "read", i, i + 1)
    assert len(m._buffers[BUF]) == MAX_ACCESSES
    # A write over all of them on a third stream still sees the newest.
    assert len(m.write(BUF, S3, "memset")) == MAX_ACCESSES


def test_a_covering_write_replaces_what_it_covers():
    m = _model(S1, S2)
    for i in range(10):
        m.write(BUF, S1, "part", 100 * i, 100 * i + 100)
    m.write(BUF, S1, "all")
    assert [a.op for _, a in m._buffers[BUF]] == ["all"]
    (race,) = m.read(BUF, S2, "read", 0, 10)
    assert race.first.op == "all"


def test_synchronizing_the_legacy_stream_waits_for_blocking_streams():
    m = _model(S1, LEGACY, nonblocking=(S2,))
    m.write(BUF, S1)
    m.write(OTHER, S2)
    m.sync_stream(LEGACY)
    assert m.read(BUF, S3) == []                      # S1 is blocking: waited for
    assert [r.kind for r in m.read(OTHER, S3)] == ["read after write"]   # S2 is not


def test_a_use_after_a_free_not_ordered_after_it_is_reported():
    m = _model(S1, S2)
    m.alloc(BUF, S1)
    m.sync_stream(S1)
    m.free(BUF, S1)
    (race,) = m.read(BUF, S2, "late read")
    assert (race.first.op, race.second.op) == ("free", "late read")
    # A new allocation under the same key starts afresh.
    m.alloc(BUF, S2)
    assert m.read(BUF, S2) == []


def test_the_state_after_a_raised_race_is_the_state_after_a_collected_one():
    runs = []
    for mode in ("collect", "raise"):
        m = Model(mode)
        m.stream(S1), m.stream(S2)
        m.alloc(BUF, S1)
        try:
            m.free(BUF, S2)
        except RaceError:
            pass
        runs.append([(a.op, a.stream) for _, a in m._buffers[BUF]])
    assert runs[0] == runs[1] == [("free", S2)]


def test_an_allocation_or_a_free_is_one_step_under_the_lock():
    # Two steps (the history dropped, then the access) would let another
    # thread's allocation of the same address in between be dropped.
    class Counting:
        def __init__(self):
            self.lock, self.taken = threading.Lock(), 0

        def __enter__(self):
            self.lock.acquire()
            self.taken += 1

        def __exit__(self, *exc):
            self.lock.release()

    m = _model(S1, S2)
    m._lock = Counting()
    m.alloc(BUF, S1)
    assert m._lock.taken == 1
    m.free(BUF, S1)
    assert m._lock.taken == 2


def test_bad_arguments_are_named():
    for bad in (2.5, "8", -1, True):
        with pytest.raises(ValueError, match="stack_depth"):
            Model(stack_depth=bad)
    with pytest.raises(TypeError, match="buffer must be a hashable key, not list"):
        _model(S1).read([1], S1)

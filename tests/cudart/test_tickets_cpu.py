"""One-shot tickets (src/cudart/fence.h), without a GPU: the first call
of a ticket claims its payload, every later call (a replay of a graph that
captured the one-shot behind the enqueue's back) finds it stale, and a slot
given back and issued again does not answer the old ticket."""
import threading

import streams
from streams import _cudart


def test_a_ticket_is_claimed_once_and_later_calls_are_stale():
    before = streams.debug_counters()
    ticket = _cudart._ticket_issue()
    assert ticket != 0
    assert streams.debug_counters()["pending_one_shots"] == before["pending_one_shots"] + 1
    assert _cudart._ticket_claim(ticket) is True
    assert _cudart._ticket_claim(ticket) is False
    assert _cudart._ticket_claim(ticket) is False
    after = streams.debug_counters()
    assert after["pending_one_shots"] == before["pending_one_shots"]
    assert after["stale_one_shot_calls"] == before["stale_one_shot_calls"] + 2


def test_a_reused_slot_does_not_answer_an_old_ticket():
    old = _cudart._ticket_issue()
    assert _cudart._ticket_claim(old)
    new = _cudart._ticket_issue()
    # The freed slot is issued again (last in, first out), with a new generation.
    assert new & 0xFFFFFFFF == old & 0xFFFFFFFF and new != old
    assert _cudart._ticket_claim(old) is False
    assert _cudart._ticket_claim(new) is True


def test_tickets_never_issued_are_stale():
    for bogus in (0, (1 << 32) | 0x3FFFFF, (7 << 32) | 0xFFFFFFF0, (1 << 64) - 1):
        assert _cudart._ticket_claim(bogus) is False


def test_concurrent_claims_of_one_ticket_have_one_winner():
    for _ in range(200):
        ticket = _cudart._ticket_issue()
        wins = []
        barrier = threading.Barrier(4)

        def claim():
            barrier.wait()
            wins.append(_cudart._ticket_claim(ticket))
        threads = [threading.Thread(target=claim) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(wins) == [False, False, False, True]

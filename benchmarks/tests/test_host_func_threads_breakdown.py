"""The probe of host callbacks from 8 threads (benchmarks/probes/host_func_threads_breakdown.py),
checked without a GPU: it says why it cannot run, its producers make exactly the calls
asked for, from 8 threads, and its summary is the median and half the p10-p90 spread."""
import threading

import pytest

from benchmarks.probes import host_func_threads_breakdown as probe


def test_without_a_gpu_it_says_why_and_fails(capsys):
    import streams
    try:
        has_gpu = streams.device_count() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        pytest.skip("a GPU is here: the probe would run")
    assert probe.main(["--calls", "8", "--rounds", "1"]) == 1
    assert "no usable CUDA device" in capsys.readouterr().err


def test_producers_make_n_calls_from_8_threads():
    lock = threading.Lock()
    calls, threads = [0], set()

    def work(k):
        with lock:
            calls[0] += k
            threads.add(threading.get_ident())

    t0, t1 = probe._producers(work, 21)
    assert calls[0] == 21 and len(threads) == probe.THREADS and t1 >= t0


def test_producers_raise_what_a_thread_raised():
    def work(k):
        raise ValueError("enqueue failed")

    with pytest.raises(ValueError, match="enqueue failed"):
        probe._producers(work, 16)


def test_stats_are_the_median_and_half_the_p10_p90_spread():
    med, spread = probe._stats([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100.0])
    assert med == 6 and spread == pytest.approx((10 - 2) / 2 / 6 * 100)

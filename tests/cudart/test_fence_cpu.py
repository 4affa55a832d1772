"""The capture fence and the capture lock (src/cudart/fence.h), without a
GPU: the header needs only pthreads and libc, so a small C program includes
it alone and checks what the enqueues and captures of streams rely on.

* A capture's begin or end on a stream (a write hold) never overlaps an
  enqueue on that stream (a read hold), nor another begin or end there.
* Holds on different streams never wait for one another: a capture begun on
  stream A goes through while an enqueue holds stream B's fence for as long
  as a full queue could keep it there (the deadlock of a process-wide fence).
* Writers first: an enqueue that arrives while a capture waits on its stream
  waits for that capture.
* The capture lock is exclusive, and a write hold takes it.
* Many streams at once (the table grows and its entries move) under 8
  threads: no overlap, no hang, and the table is empty at the end.
"""
import os
import shutil
import subprocess
import textwrap

import pytest

from _support import ROOT

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

PROGRAM = textwrap.dedent(r"""
    #define _GNU_SOURCE
    #include <pthread.h>
    #include <stdatomic.h>
    #include <stdint.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <time.h>
    #include <unistd.h>
    #include "cudart/fence.h"

    static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
    }
    static void *A = (void *)0x1000, *B = (void *)0x2000;
    static atomic_int step;

    /* An enqueue on B blocked in the driver for 0.5 s, in its read hold. */
    static void *slow_reader(void *arg) {
        (void)arg;
        streams_fence_enter(B);
        atomic_store(&step, 1);
        usleep(500000);
        streams_fence_leave(B);
        return NULL;
    }

    static void *writer_b(void *arg) {
        (void)arg;
        streams_fence_close(B);
        atomic_store(&step, 3);
        usleep(100000);
        streams_fence_open(B);
        return NULL;
    }

    #define NS 64
    static atomic_int readers_in[NS], writers_in[NS], capture_in, bad, stop;
    static void *hammer(void *arg) {
        unsigned seed = (unsigned)(uintptr_t)arg;
        while (!atomic_load(&stop)) {
            int s = rand_r(&seed) % NS, k = rand_r(&seed) % 8;
            void *h = (void *)(uintptr_t)(0x10000 + 16 * s);
            if (k == 0) {                       /* an enqueue into a capture */
                streams_capture_enter();
                if (atomic_fetch_add(&capture_in, 1)) atomic_fetch_add(&bad, 1);
                atomic_fetch_sub(&capture_in, 1);
                streams_capture_leave();
            } else if (k == 1) {                /* a capture's begin or end */
                streams_fence_close(h);
                if (atomic_fetch_add(&writers_in[s], 1) || atomic_load(&readers_in[s]))
                    atomic_fetch_add(&bad, 1);
                if (atomic_fetch_add(&capture_in, 1)) atomic_fetch_add(&bad, 1);
                atomic_fetch_sub(&capture_in, 1);
                atomic_fetch_sub(&writers_in[s], 1);
                streams_fence_open(h);
            } else {                            /* a one-shot enqueue */
                streams_fence_enter(h);
                atomic_fetch_add(&readers_in[s], 1);
                if (atomic_load(&writers_in[s])) atomic_fetch_add(&bad, 1);
                atomic_fetch_sub(&readers_in[s], 1);
                streams_fence_leave(h);
            }
        }
        return NULL;
    }

    int main(void) {
        pthread_t r, w, t[8];
        double t0, took;
        int i;
        alarm(20);                              /* a hang fails the test */
        pthread_create(&r, NULL, slow_reader, NULL);
        while (atomic_load(&step) != 1) usleep(1000);
        t0 = now();
        streams_fence_close(A);                 /* another stream: at once */
        streams_fence_open(A);
        took = now() - t0;
        printf("other stream %.3f\n", took);
        pthread_create(&w, NULL, writer_b, NULL);
        usleep(100000);                         /* the writer now waits on B */
        printf("writer waited %d\n", atomic_load(&step) == 1);
        i = streams_fence_try_enter(A);         /* a free stream: taken */
        if (i) streams_fence_leave(A);
        printf("try free %d busy %d\n", i, streams_fence_try_enter(B));
        t0 = now();
        streams_fence_enter(B);                 /* writers first: after it */
        printf("reader after writer %d %.3f\n", atomic_load(&step) == 3, now() - t0);
        streams_fence_leave(B);
        pthread_join(r, NULL);
        pthread_join(w, NULL);
        for (i = 0; i < 8; i++) pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)(i + 1));
        usleep(1500000);
        atomic_store(&stop, 1);
        for (i = 0; i < 8; i++) pthread_join(t[i], NULL);
        printf("overlaps %d table %zu\n", atomic_load(&bad), streams_fence_streams_now());
        return 0;
    }
""")


@pytest.mark.skipif(CC is None, reason="no C compiler here")
def test_the_fence_excludes_per_stream_and_never_across_streams(tmp_path):
    src = tmp_path / "fence_check.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "fence_check"
    subprocess.run([CC, "-O2", "-std=gnu11", "-pthread", f"-I{ROOT / 'src'}", str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    other = float(out.split("other stream ")[1].split()[0])
    assert other < 0.1, f"a capture on another stream waited {other:.3f} s for the held one"
    assert "writer waited 1" in out, out
    # The look that must not wait: taken on a free stream, refused (not
    # waited for) on one where a capture waits to begin or end.
    assert "try free 1 busy 0" in out, out
    after = out.split("reader after writer ")[1].split()
    assert after[0] == "1", f"a reader went ahead of a waiting writer: {out}"
    assert "overlaps 0 table 0" in out, out

#!/usr/bin/env bash
# The benchmark rows with targets and the probes that explain them, in one
# device call on a quiet machine (no tests beside it):
#
#   bash tools/gpu_bench.sh [BEFORE_DIR] [FT_BUNDLE]
#
# BEFORE_DIR (default .before): the source of the build to compare with
# (`git archive REV --prefix=.before/ | tar -x`), FT_BUNDLE (default
# .ft/py313t-bundle.tar, from tools/free_threaded.sh pack); carry both.
# STEPS (default "rows one host ft") picks:
#   rows  every row with a target, the status rows and the host-function
#         rows: the C program, streams from Python and Cython and the
#         baseline build of each, CuPy, PyTorch, cuda.core, a process each,
#         every worker on CPUs 2,3 (benchmarks.run --baseline)
#   one   the status and enqueue rows with the Python contenders in one
#         shared process (--one-process): whether a lead is the library's
#   status benchmarks/probes/status_breakdown.py on CPUs 2,3: where a
#         status or enqueue call's time goes, layer by layer, and the
#         pieces alone
#   host  benchmarks/probes/host_func_threads_breakdown.py: 8 producer
#         threads of Python callbacks, producers giving way or not, native
#         functions
#   ft    benchmarks/probes/quick_timing.py under this build and the
#         free-threaded one, alternated five times on CPUs 2,3 (per call
#         from Python, no floor), and the median of each row per interpreter
# Each step is bounded (ROWS_TIMEOUT, ONE_TIMEOUT, STATUS_TIMEOUT,
# HOST_TIMEOUT, FT_TIMEOUT seconds).  Results under $OUT (default
# /tmp/streams-bench): rows.txt/json,
# one.txt/json, status.txt, host.txt, ft.txt, and the build logs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD" OUT="${OUT:-/tmp/streams-bench}" PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1
STEPS="${STEPS:-rows one host ft}"
BEFORE_SRC="${1:-.before}"
BUNDLE="${2:-.ft/py313t-bundle.tar}"
"$PY" setup.py build_ext --inplace -j 16 >"$OUT/bench-build.log" 2>&1 \
    || { tail -30 "$OUT/bench-build.log"; echo "BUILD FAILED"; exit 1; }
OPS=stream_query,stream_synchronize,event_record,event_query,stream_wait_event,kernel_launch
OPS=$OPS,prepared_launch,kernel_launch_args16,graph_launch,host_func_round_trip
OPS=$OPS,host_func_native_round_trip,host_func_throughput_8threads,event_create_destroy
OPS=$OPS,stream_create_destroy
# BENCH_OPS and BENCH_CONTENDERS narrow the rows step (a shorter call).
OPS="${BENCH_OPS:-$OPS}"
# Named contenders leave out the baselines unless named too (benchmarks.run
# adds them only to its default list).
CONTENDERS="${BENCH_CONTENDERS:-c,streams-py,streams-py-baseline,streams-cy,streams-cy-baseline,cupy,torch,cuda-core}"
if [[ "$STEPS" == *rows* ]]; then
    rm -rf /tmp/streams-before && cp -a "$BEFORE_SRC" /tmp/streams-before
    # The folder that holds its streams package: src/ since the src layout.
    BASELINE=/tmp/streams-before; [ -d "$BASELINE/src/streams" ] && BASELINE="$BASELINE/src"
    (cd /tmp/streams-before && "$PY" setup.py build_ext --inplace -j 16) \
        >"$OUT/bench-build-before.log" 2>&1 || { tail -30 "$OUT/bench-build-before.log"; exit 1; }
    timeout "${ROWS_TIMEOUT:-300}" "$PY" -m benchmarks.run --no-progress --cpus 2,3 \
        --rounds 3 --batches 6 --baseline "$BASELINE" --ops "$OPS" \
        --contenders "$CONTENDERS" --json "$OUT/rows.json" >"$OUT/rows.txt" 2>&1
    echo "rows exit $?" >>"$OUT/rows.txt"
    sed -n '/^   operation/,/^   targets/p' "$OUT/rows.txt"; tail -1 "$OUT/rows.txt"
fi
if [[ "$STEPS" == *one* ]]; then
    timeout "${ONE_TIMEOUT:-120}" "$PY" -m benchmarks.run --no-progress --cpus 2,3 --one-process \
        --rounds 3 --batches 6 --ops stream_query,event_record,event_query,stream_wait_event \
        --contenders streams-py,streams-cy,cupy,torch,cuda-core \
        --json "$OUT/one.json" >"$OUT/one.txt" 2>&1
    echo "one-process exit $?" >>"$OUT/one.txt"
    sed -n '/^   operation/,/^   targets/p' "$OUT/one.txt"; tail -1 "$OUT/one.txt"
fi
if [[ "$STEPS" == *status* ]]; then
    timeout "${STATUS_TIMEOUT:-120}" taskset -c 2,3 "$PY" -m benchmarks.probes.status_breakdown \
        >"$OUT/status.txt" 2>&1
    echo "status breakdown exit $?" >>"$OUT/status.txt"
    cat "$OUT/status.txt"
fi
if [[ "$STEPS" == *host* ]]; then
    timeout "${HOST_TIMEOUT:-120}" "$PY" -m benchmarks.probes.host_func_threads_breakdown \
        >"$OUT/host.txt" 2>&1
    echo "host breakdown exit $?" >>"$OUT/host.txt"
    cat "$OUT/host.txt"
fi
if [[ "$STEPS" == *ft* ]]; then
    FT_PY="$(tar xOf "$BUNDLE" PREFIX)/bin/python3.13t"
    OUT="$OUT/ft-build" FT_BUILD_ONLY=1 bash tools/free_threaded.sh gpu "$BUNDLE" \
        >"$OUT/ft-build.txt" 2>&1 || { tail -20 "$OUT/ft-build.txt"; exit 1; }
    # On CPUs 2,3 as the rows step, which took the spread from +-50% to a
    # few per cent.
    PIN=()
    command -v taskset >/dev/null && PIN=(taskset -c 2,3)
    for round in 1 2 3 4 5; do
        for py in "$PY" "$FT_PY"; do
            echo "== round $round: $("$py" -c 'import sys; print(sys.version.split()[0], "GIL" if getattr(sys, "_is_gil_enabled", lambda: True)() else "no GIL")')"
            PYTHONPATH="$ROOT/src" timeout "${FT_TIMEOUT:-60}" "${PIN[@]}" "$py" -m benchmarks.probes.quick_timing
        done
    done >"$OUT/ft.txt" 2>&1
    "$PY" -m benchmarks.probes.quick_timing --summarize "$OUT/ft.txt" | tee -a "$OUT/ft.txt"
    cat "$OUT/ft.txt"
fi

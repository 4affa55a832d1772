#!/usr/bin/env bash
# Build in place and run the whole test suite on a GPU machine with no
# network (the device machine: CUDA at /usr/local/cuda, Cython, setuptools,
# pytest and the peer libraries preinstalled).  One call does everything:
#
#   bash tools/gpu_suite.sh [options] [extra pytest args]
#
#   --debug-refcounts   build with STREAMS_DEBUG_REFCOUNTS=1: every GPU test's
#                       teardown then also checks that each payload/DLPack
#                       reference, allocation and module was given back
#   --cuda12 DIR        build for CUDA 12 from DIR (include/ with crt/, lib/
#                       with libcudart_static.a; tools/build/stage_cuda12.py makes
#                       .cu12/ here, which the device call must carry)
#   --sanitizer TOOL    run pytest under compute-sanitizer --tool TOOL
#                       (memcheck, racecheck, synccheck, initcheck; a
#                       comma-separated list runs each tool side by side
#                       on one build, its logs in $OUT/TOOL/); its
#                       report goes to $OUT/sanitizer-TOOL-PID.log, one per
#                       process (the subprocess tests are followed); the tests
#                       marked `timing`, `slow`, `concurrent` or
#                       `hidden_device` are deselected (pyproject.toml's
#                       markers say why each cannot hold under the tool)
#   --no-build          use the build already in place (several sanitizer
#                       runs side by side share one build)
#   SANITIZER_BACKTRACE=yes  saved host backtraces in the reports (default no:
#                       they keep the Python frames of launch sites alive)
#   SANITIZER_EXTRA="..." more compute-sanitizer options (word-split)
#   SANITIZER_WORKERS=N (default 4) under a sanitizer, pytest-xdist spreads
#                       the tests over N worker Pythons, each under the tool
#                       (one process runs the suite 5-10x slower than bare,
#                       too slow for one device call); 1: one process under
#                       the tool, test children followed too
#
# Logs go to $OUT (if set) so they come back from the device machine.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
SANITIZER=""
TAG="release"
NO_BUILD=""
while [ $# -gt 0 ]; do
    case "$1" in
        --debug-refcounts) export STREAMS_DEBUG_REFCOUNTS=1; TAG="debug"; shift ;;
        --cuda12) export CUDA_HOME="$(cd "$2" && pwd)" STREAMS_CUDA_MAJOR=12; TAG="cu12"; shift 2 ;;
        --sanitizer) SANITIZER="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        *) break ;;
    esac
done

echo "== nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== build ($TAG, CUDA_HOME=$CUDA_HOME)"
# One distribution owns `streams` at a time (cuda-streams or -cu12).
if [ -z "$NO_BUILD" ]; then
$PY -m pip uninstall -y -q cuda-streams cuda-streams-cu12 >/dev/null 2>&1 || true
if ! $PY -m pip install --no-build-isolation --no-deps -e . >"$OUT/build-$TAG.log" 2>&1; then
    tail -50 "$OUT/build-$TAG.log"
    echo "BUILD FAILED"
    exit 1
fi
fi
$PY -c "import streams; print('streams', streams.__version__, 'devices', streams.device_count(), 'driver', streams.driver_version(), 'runtime', streams.runtime_version(), 'debug build', streams.debug_build())"
if [[ "$SANITIZER" == *,* ]]; then
    # Several tools: one run each, side by side on the build above, each
    # with its own log folder; their summaries are printed here in turn.
    STATUS=0
    IFS=, read -r -a TOOLS <<<"$SANITIZER"
    for t in "${TOOLS[@]}"; do
        mkdir -p "$OUT/$t"
        OUT="$OUT/$t" bash "$0" --no-build --sanitizer "$t" "$@" >"/tmp/streams-sanitizer-$t.txt" 2>&1 &
    done
    for t in "${TOOLS[@]}"; do
        wait -n || STATUS=1
    done
    for t in "${TOOLS[@]}"; do
        echo "== $t"
        grep -E "^(FAILED|ERROR) " "$OUT/$t/pytest-$TAG-$t.log" | head -20
        sed -n '/^== compute-sanitizer/,$p' "/tmp/streams-sanitizer-$t.txt"
        tail -1 "$OUT/$t/pytest-$TAG-$t.log"; echo
    done
    exit "$STATUS"
fi
echo "== tests"
# A hang must not eat the whole call: per-test timeouts dump every thread's
# stack, and the suite as a whole stops before the device call's limit.
RUN=()
SELECT=()
if [ -n "$SANITIZER" ]; then
    SAN="$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")"
    # Errors make the sanitizer exit 86 even when every test passed.
    # API errors are not reported: the suite provokes CUDA errors on purpose
    # (bad handles, capture misuse, kernels' parameter probing) to test that
    # each becomes a CudaError; memory, race and synchronization errors are.
    # No saved backtraces: the tool keeps the Python frames of each kernel
    # launch's call site for them, for as long as the stream lives (seen on
    # an H100: the leak check then found a test's events still open, held
    # by its frame, after launches on a PyTorch stream, which outlives the
    # test; with --show-backtrace no they were closed).  Rerun a failing
    # test with SANITIZER_BACKTRACE=yes to see where.
    TOOL=("$SAN" --tool "$SANITIZER" --error-exitcode 86 --report-api-errors no
          --show-backtrace "${SANITIZER_BACKTRACE:-no}" --log-file "$OUT/sanitizer-$SANITIZER-%p.log"
          --print-limit 100 ${SANITIZER_EXTRA:-})
    SELECT=(-m "not timing and not slow and not concurrent and not hidden_device")
    # The stress tests run fewer rounds (tests/_support.py, stress_rounds).
    export STREAMS_TEST_UNDER_SANITIZER=1
    WORKERS="${SANITIZER_WORKERS:-4}"
    if [ "$WORKERS" -gt 1 ] && $PY -c "import xdist" 2>/dev/null; then
        # pytest-xdist workers, each one a Python under the tool (the
        # controller only collects and reports, bare).  The workers do not
        # follow the test's own child processes: those are crash
        # containment, and a child that imports CUDA under the tool takes
        # over 100 s to start; every test's in-process part is checked.
        WRAP="/tmp/streams-python-under-$SANITIZER.sh"
        printf '#!/bin/sh\nexec' >"$WRAP"
        printf ' %q' "${TOOL[@]}" --target-processes application-only "$(command -v $PY)" >>"$WRAP"
        printf ' "$@"\n' >>"$WRAP"
        chmod +x "$WRAP"
        SELECT+=(--dist load --tx "$WORKERS*popen//python=$WRAP" --timeout-method=thread)
    else
        # One process under the tool, following the subprocess tests too.
        RUN=("${TOOL[@]}" --target-processes all)
    fi
else
    SELECT=(--junitxml="$OUT/junit-$TAG.xml")
fi
stackdump_preload
# No paths: pytest runs every suite of pyproject's testpaths.
timeout "${SUITE_TIMEOUT:-540}" "${RUN[@]}" $PY -m pytest -q -rfEs -p no:cacheprovider \
    --timeout=120 -o faulthandler_timeout=100 "${SELECT[@]}" "$@" 2>&1 \
    | tee "$OUT/pytest-$TAG${SANITIZER:+-$SANITIZER}.log"
STATUS="${PIPESTATUS[0]}"
stackdump_report
if [ -n "$SANITIZER" ]; then
    # The sanitizer's own summary and exit code end the run (86: it found
    # errors, whatever pytest said).
    echo "== compute-sanitizer --tool $SANITIZER"
    # One report per process; merged into one file so that it comes back.
    LOGS=("$OUT"/sanitizer-"$SANITIZER"-[0-9]*.log)
    cat "${LOGS[@]}" >"$OUT/sanitizer-$SANITIZER.log" && rm -f "${LOGS[@]}"
    echo "${#LOGS[@]} processes checked; their summaries:"
    grep -h "SUMMARY" "$OUT/sanitizer-$SANITIZER.log" | sed 's/^=* *//' | sort | uniq -c
    # Under xdist the workers' own exit codes are not pytest's: read the
    # error counts of their summaries.
    if grep -hE "ERROR SUMMARY: [1-9]" "$OUT/sanitizer-$SANITIZER.log" >/dev/null; then
        STATUS=86
    fi
    echo "exit code $STATUS"
fi
exit "$STATUS"

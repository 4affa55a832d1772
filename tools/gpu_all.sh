#!/usr/bin/env bash
# Every GPU check of a release in one job on one GPU machine: the matrix
# rows of ci/gpu-matrix.yml (release, debug-refcounts, cuda12,
# free-threaded), the three sanitizers over the whole suite (the newest
# tests first), the race checker over the suite, the stateful fuzzer (plain
# and with the checker collecting), the NCCL tests from carried wheels, then,
# on a quiet machine, the benchmark rows against earlier builds.
#
#   bash tools/gpu_all.sh                 (from the checkout; usually started
#                                          detached by tools/gpu_poll.sh)
#
# Each lane runs in a copy of the checkout under /tmp (the builds are in
# place, one flavour a copy); the release build is made once and copied to
# every lane that tests it (GPU_TEST_REUSE_BUILD=1).  Every lane starts with
# SIGINT at its default: a job a script puts in the background inherits it
# ignored, and the Ctrl-C tests would then fail.
#
# What it reads from the checkout (ignored folders, made beforehand on a
# machine with network; each is skipped, saying so, where it is missing):
#   .ft/py313t-bundle.tar   tools/free_threaded.sh pack
#   .cu12/                  python tools/build/stage_cuda12.py
#   .whl/                   nccl4py, cuda-core 1.x and cuda-pathfinder wheels
#   .before/ .gil/          sources of earlier commits to benchmark against
#                           (git archive REV --prefix=.before/ | tar -x)
# Settings (environment): QUIET (s after the start when the tests are
# stopped and the benchmarks begin; default 800), SAN_W, MATRIX_W, COLLECT_W
# (xdist workers), FUZZ_S, CFUZZ_S (fuzzer seconds), NEW_TESTS (what the
# sanitizers run first), BENCH_S (seconds per benchmark run).
# Results: RES (default /tmp/streams-gpu-all): progress.txt (one line per
# event, with seconds since the start), NAME.out and NAME/ (each row's
# output and logs), fuzz.txt, bench-*.txt, ALL.done at the end.
set -u
SRC=$(pwd)
RES=${RES:-/tmp/streams-gpu-all}
mkdir -p "$RES"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s] $*" >> "$RES/progress.txt"; }
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 \
       TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
QUIET=${QUIET:-800}
SAN_W=${SAN_W:-3} MATRIX_W=${MATRIX_W:-4} COLLECT_W=${COLLECT_W:-5}
FUZZ_S=${FUZZ_S:-600} CFUZZ_S=${CFUZZ_S:-300} BENCH_S=${BENCH_S:-240}
NEW_TESTS=${NEW_TESTS:-tests/semaphore tests/deadline tests/foreign tests/racecheck}
# SIGINT back at its default, then the command.
DFL=("$PY" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])')
log "start: QUIET=$QUIET SAN_W=$SAN_W MATRIX_W=$MATRIX_W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$RES/gpu.txt" 2>&1

# ---- builds -------------------------------------------------------------------------
lane() { cp -a /tmp/gpu-all-base "/tmp/gpu-all-$1"; }
build() {  # build NAME DIR [env...]: in place, in the background; NAME.rc when done
  local name=$1 dir=$2; shift 2
  (cd "$dir" && env "$@" "$PY" setup.py build_ext --inplace --force > "$RES/build-$name.log" 2>&1
   echo $? > "$RES/build-$name.rc"; log "build $name: exit $(cat "$RES/build-$name.rc")") &
}
rm -rf /tmp/gpu-all-* && cp -a "$SRC" /tmp/gpu-all-base &&
    rm -rf /tmp/gpu-all-base/.ft /tmp/gpu-all-base/.whl /tmp/gpu-all-base/.before /tmp/gpu-all-base/.gil
(cd /tmp/gpu-all-base && "$PY" setup.py build_ext --inplace > "$RES/build-release.log" 2>&1)
rc=$?; log "build release: exit $rc"
[ $rc = 0 ] || { tail -30 "$RES/build-release.log" > "$RES/ALL.done"; exit 1; }
for d in memcheck racecheck synccheck release collect fuzz cfuzz dbg cu12 ft nonvtx bench; do lane "$d"; done
build dbg /tmp/gpu-all-dbg STREAMS_DEBUG_REFCOUNTS=1
[ -f "$SRC/.cu12/lib/libcudart_static.a" ] && build cu12 /tmp/gpu-all-cu12 "CUDA_HOME=$SRC/.cu12" STREAMS_CUDA_MAJOR=12
build nonvtx /tmp/gpu-all-nonvtx STREAMS_NVTX=0
if [ -f "$SRC/.ft/py313t-bundle.tar" ]; then
    (cd /tmp/gpu-all-ft && FT_BUILD_ONLY=1 OUT="$RES/ft-build" bash tools/free_threaded.sh gpu \
        "$SRC/.ft/py313t-bundle.tar" > "$RES/build-ft.log" 2>&1
     echo $? > "$RES/build-ft.rc"; log "build ft: exit $(cat "$RES/build-ft.rc")") &
fi
for b in before gil; do
    [ -d "$SRC/.$b" ] || continue
    (cp -a "$SRC/.$b" "/tmp/gpu-all-B-$b" && cd "/tmp/gpu-all-B-$b" &&
     "$PY" setup.py build_ext --inplace > "$RES/build-$b.log" 2>&1
     echo $? > "$RES/build-$b.rc"; log "build $b: exit $(cat "$RES/build-$b.rc")") &
done
wait_for() { while [ ! -f "$1" ]; do sleep 2; done; [ "$(cat "$1")" = 0 ]; }

# ---- tests ------------------------------------------------------------------------------
row() {  # row NAME DIR [VAR=value...] -- RUNNER_ARGS...
    local name=$1 dir=$2 envs=(); shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    [ -f "$RES/.quiet" ] && { log "row $name: not started (the tests were stopped)"; return 1; }
    log "row $name: start"
    (cd "$dir" && env "${envs[@]}" GPU_TEST_LOGS="$RES/$name" "${DFL[@]}" bash ci/run-gpu-tests "$@" \
        > "$RES/$name.out" 2>&1; echo $? > "$RES/$name.rc")
    log "row $name: exit $(cat "$RES/$name.rc") $(grep -E '[0-9]+ (passed|failed)' "$RES/$name.out" | tail -1)"
}
IGNORE=(); for t in $NEW_TESTS; do IGNORE+=("--ignore=$t"); done
for tool in memcheck racecheck synccheck; do
    (row "$tool-new" "/tmp/gpu-all-$tool" GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$SAN_W" -- \
         release "$tool" -- $NEW_TESTS
     row "$tool-rest" "/tmp/gpu-all-$tool" GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$SAN_W" -- \
         release "$tool" -- tests "${IGNORE[@]}") &
done
fuzz() {  # fuzz NAME SECONDS SEED [VAR=value...]
    local name=$1 secs=$2 seed=$3; shift 3
    log "$name: start"
    (cd "/tmp/gpu-all-$name" && env "$@" PYTHONPATH="/tmp/gpu-all-$name/src" timeout $((secs + 180)) \
        "${DFL[@]}" "$PY" tests/fuzz --seconds "$secs" --seed "$seed" > "$RES/$name.txt" 2>&1
     echo $? > "$RES/$name.rc"; log "$name: exit $(cat "$RES/$name.rc") $(tail -1 "$RES/$name.txt")")
}
fuzz fuzz "$FUZZ_S" 41 &
fuzz cfuzz "$CFUZZ_S" 43 STREAMS_RACECHECK=collect &
row release /tmp/gpu-all-release GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$MATRIX_W" -- release &
(wait_for "$RES/build-dbg.rc" &&
 row dbg /tmp/gpu-all-dbg GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$MATRIX_W" -- debug-refcounts) &
if [ -f "$SRC/.cu12/lib/libcudart_static.a" ]; then
    (wait_for "$RES/build-cu12.rc" &&
     row cu12 /tmp/gpu-all-cu12 GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$MATRIX_W" \
         "CUDA12_HOME=$SRC/.cu12" -- cuda12) &
else log "row cu12: no .cu12 (python tools/build/stage_cuda12.py)"; fi
if [ -f "$SRC/.ft/py313t-bundle.tar" ]; then
    (wait_for "$RES/build-ft.rc" &&
     row ft /tmp/gpu-all-ft GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$MATRIX_W" \
         "FT_PREFIX=$(tar xOf "$SRC/.ft/py313t-bundle.tar" PREFIX)" -- free-threaded) &
else log "row ft: no .ft bundle (bash tools/free_threaded.sh pack)"; fi
# After the release row: NCCL from the carried wheels on its build, then the
# race checker over the whole suite.
(wait_for "$RES/release.rc"
 if ls "$SRC"/.whl/*.whl > /dev/null 2>&1; then
     "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-all-nccl \
         "$SRC"/.whl/*.whl > "$RES/nccl-pip.txt" 2>&1
     (cd /tmp/gpu-all-release && PYTHONPATH=/tmp/gpu-all-nccl:/tmp/gpu-all-release/src timeout 300 \
         "$PY" -m pytest -q -rfEs -p no:cacheprovider --timeout=120 tests/foreign/test_nccl_gpu.py \
         > "$RES/nccl.txt" 2>&1; log "nccl: exit $? $(tail -1 "$RES/nccl.txt")")
 fi
 row collect /tmp/gpu-all-collect GPU_TEST_REUSE_BUILD=1 "GPU_TEST_WORKERS=$COLLECT_W" \
     STREAMS_RACECHECK=collect -- release) &

# ---- quiet: stop what is left, then the benchmarks -----------------------------------------
done_count() {
    local n=0 f
    for f in memcheck-rest racecheck-rest synccheck-rest release dbg cu12 ft collect fuzz cfuzz; do
        [ -f "$RES/$f.rc" ] && n=$((n + 1))
    done
    echo $n
}
while [ "$(el)" -lt "$QUIET" ] && [ "$(done_count)" -lt 10 ]; do sleep 5; done
touch "$RES/.quiet"
log "quiet: stopping what is left ($(done_count) of 10 lanes done)"
pkill -INT -f pytest; pkill -INT -f tests/fuzz
sleep 20
pkill -KILL -f pytest; pkill -KILL -f compute-sanitizer; pkill -KILL -f tests/fuzz
sleep 5
BENCH=c,streams-py,streams-py-baseline,streams-cy,streams-cy-baseline
ROWS=stream_query,stream_synchronize,event_record,event_query,stream_wait_event,kernel_launch
ROWS=$ROWS,prepared_launch,kernel_launch_args16,graph_launch,graph_launch_sync
DEADLINE_ROWS=kernel_launch_deadline,graph_launch_deadline,graph_launch_sync_deadline
bench() {  # bench NAME BASELINE_DIR OPS
    local base=$2
    [ -d "$base/src/streams" ] && base=$base/src
    (cd /tmp/gpu-all-bench && timeout "$BENCH_S" "$PY" -m benchmarks.run --no-progress --cpus 2,3 \
        --rounds 3 --batches 6 --baseline "$base" --ops "$3" --contenders "$BENCH" \
        --json "$RES/bench-$1.json" > "$RES/bench-$1.txt" 2>&1; log "bench $1: exit $?")
}
[ -f "$RES/build-before.rc" ] && bench before /tmp/gpu-all-B-before "$ROWS,$DEADLINE_ROWS"
[ -f "$RES/build-gil.rc" ] && bench gil /tmp/gpu-all-B-gil "$ROWS"
[ -f "$RES/build-nonvtx.rc" ] && bench nonvtx /tmp/gpu-all-nonvtx "$ROWS"
(cd /tmp/gpu-all-bench && PYTHONPATH=/tmp/gpu-all-bench/src timeout 90 taskset -c 2,3 \
    "$PY" -m benchmarks.probes.semaphore_latency --rounds 3 > "$RES/semaphore.txt" 2>&1
 log "semaphore probe: exit $?"
 PYTHONPATH=/tmp/gpu-all-bench/src timeout 60 taskset -c 2,3 "$PY" -m benchmarks.probes.checker_cost \
     > "$RES/checker_cost.txt" 2>&1; log "checker cost: exit $?")
log "all done"
echo OK > "$RES/ALL.done"

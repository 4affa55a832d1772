#!/usr/bin/env bash
# Everything a change must pass on the GPU, in one device call: the three
# builds' suites (tools/gpu_matrix.sh) with the stateful fuzzer running
# beside them, then the suite under memcheck, racecheck and synccheck
# (tools/gpu_suite.sh --sanitizer).  Each step is bounded so that the call
# ends inside the device call's 10 minutes.
#
#   bash tools/gpu_all.sh [CUDA12_DIR]     (default .cu12; carry it)
#
# FUZZ_SECONDS (default 240) the fuzzer's budget beside the matrix, FUZZ_SEED
# its seed; FUZZ2_SECONDS (240) beside the sanitizers, FUZZ_MEMCHECK_SECONDS
# (60) under memcheck there.
# STEPS (default "matrix sanitizers"): one of them alone splits the work
# over two device calls (the machine stays warm in between).  STEPS=diagnose
# runs the free-threaded suite beside memcheck on the eight-thread tests and
# the fuzzer, with native stacks of whatever hangs (tools/stackdump.c).  STEPS=replay
# replays one fuzzer seed (FUZZ_SEED, FUZZ_SECONDS): once without shrinking,
# to see the failing example, and once beside it with every step traced,
# with the native stacks of a crash ($OUT/replay-*.txt, $OUT/stacks.txt).
# STEPS=verify, after a crash's fix: the seed in both builds, VERIFY_TESTS,
# and the free-threaded whole suite beside them.
# Logs under $OUT: matrix.txt, sanitizers.txt, fuzz.txt, and the full
# pytest and sanitizer logs in $OUT/logs.tar.gz.
source "$(dirname "$0")/gpu_env.sh"
LOGS=/tmp/streams-all
rm -rf "$LOGS" && mkdir -p "$LOGS"
CU12="${1:-.cu12}"

STEPS="${STEPS:-matrix sanitizers}"
# The release build first: the fuzzer runs on it beside the matrix.
"$PY" setup.py build_ext --inplace -j 16 >"$LOGS/build-release.log" 2>&1 \
    || { tail -30 "$LOGS/build-release.log"; echo "BUILD FAILED"; exit 1; }
# The debug-refcounts build in a copy of the checkout, $DEBUG_DIR
# (tools/gpu_env.sh; the in-place release build stays); $1: build jobs.
build_debug_copy() {
    fresh_copy "$DEBUG_DIR"
    (cd "$DEBUG_DIR" && STREAMS_DEBUG_REFCOUNTS=1 "$PY" setup.py build_ext --inplace -j "$1") \
        >"$LOGS/build-debug.log" 2>&1 || { tail -30 "$LOGS/build-debug.log"; echo "BUILD FAILED"; return 1; }
}
# One fuzzer seed (FUZZ_SEED, FUZZ_SECONDS) replayed without shrinking in
# the build at BUILD_DIR, at trace level TRACE: $OUT/replay-NAME.txt, the
# end of its stderr in $OUT/replay-NAME-tail.txt, all of it in $LOGS.
replay() {  # NAME TRACE BUILD_DIR
    (cd "$3" && PYTHONPATH="$3/src" STREAMS_FUZZ_SECONDS="${REPLAY_SECONDS:-${FUZZ_SECONDS:-90}}" \
        STREAMS_FUZZ_SEED="${FUZZ_SEED:-1}" STREAMS_FUZZ_SHRINK_SECONDS=0 STREAMS_FUZZ_TRACE="$2" \
        timeout $(( ${REPLAY_SECONDS:-${FUZZ_SECONDS:-90}} + 90 )) "$PY" tests/fuzz \
        >"$OUT/replay-$1.txt" 2>"$LOGS/replay-$1.log"
     echo "fuzz exit $?" >>"$OUT/replay-$1.txt"
     tail -60 "$LOGS/replay-$1.log" >"$OUT/replay-$1-tail.txt")
}
if [[ "$STEPS" == *replay* ]]; then
# REPLAY_DEBUG=1 replays in the debug-refcounts build; REPLAY_COPIES more
# untraced copies run beside the two, as load (a crash seen beside the
# matrix may need it).  A crash leaves every thread's native stack
# (STACKDUMP_ON_CRASH; no gdb there) in $OUT/stacks.txt.
DIR="$ROOT"
if [ "${REPLAY_DEBUG:-0}" = 1 ]; then
    build_debug_copy 16 || exit 1
    DIR="$DEBUG_DIR"
fi
stackdump_preload
export STACKDUMP_ON_CRASH=1
pids=()
for i in $(seq 1 "${REPLAY_COPIES:-0}"); do replay "copy$i" 0 "$DIR" & pids+=($!); done
# REPLAY_RELEASE=1: the release build too, beside the debug one.
[ "${REPLAY_RELEASE:-0}" = 1 ] && [ "$DIR" != "$ROOT" ] && { replay release 0 "$ROOT" & pids+=($!); }
replay noshrink 0 "$DIR" & pids+=($!)
replay trace "${REPLAY_TRACE:-1}" "$DIR"     # 2: every rule with its arguments
wait "${pids[@]}"
unset STACKDUMP_ON_CRASH
stackdump_report
for f in "$OUT"/replay-*.txt; do
    case "$f" in *-tail.txt) continue ;; esac
    echo "== $f"; grep -hE "^fuzz|Falsif|Error|assert|Fatal|state\." "$f" "${f%.txt}-tail.txt" | tail -12
done
tail -25 "$OUT/replay-trace-tail.txt"
fi
if [[ "$STEPS" == *matrix* ]]; then
(PYTHONPATH="$PWD/src" STREAMS_FUZZ_SECONDS="${FUZZ_SECONDS:-240}" STREAMS_FUZZ_SEED="${FUZZ_SEED:-1}" \
    timeout $(( ${FUZZ_SECONDS:-240} + 120 )) "$PY" tests/fuzz >"$LOGS/fuzz.log" 2>&1;
 echo "fuzz exit $?" >>"$LOGS/fuzz.log") &
FUZZ=$!
OUT="$LOGS" SUITE_TIMEOUT="${MATRIX_TIMEOUT:-270}" bash tools/gpu_matrix.sh "$CU12" \
    >"$OUT/matrix.txt" 2>&1
echo "matrix exit $?" >>"$OUT/matrix.txt"
wait "$FUZZ"
grep -E "^fuzz: [0-9s]|fuzz exit|FAILED|Falsifying|AssertionError|Fatal" "$LOGS/fuzz.log" | tail -20 >"$OUT/fuzz.txt"
cat "$OUT/matrix.txt" "$OUT/fuzz.txt"
fi
if [[ "$STEPS" == *sanitizers* ]]; then
# Beside the sanitizer suites: the fuzzer once more (its own seed), and the
# fuzzer itself under memcheck (the suite's xdist workers do not follow its
# child); a memcheck start takes about two minutes.
stackdump_preload
stackdump_after $(( ${FUZZ_MEMCHECK_SECONDS:-60} + 240 )) "tests/fuzz" fuzz
(PYTHONPATH="$PWD/src" STREAMS_FUZZ_SECONDS="${FUZZ2_SECONDS:-240}" STREAMS_FUZZ_SEED="$(( ${FUZZ_SEED:-1} + 1000 ))" \
    timeout $(( ${FUZZ2_SECONDS:-240} + 120 )) "$PY" tests/fuzz >"$LOGS/fuzz2.log" 2>&1;
 echo "fuzz exit $?" >>"$LOGS/fuzz2.log") &
FUZZ2=$!
(PYTHONPATH="$PWD/src" STREAMS_FUZZ_SECONDS="${FUZZ_MEMCHECK_SECONDS:-60}" STREAMS_FUZZ_SEED="$(( ${FUZZ_SEED:-1} + 2000 ))" \
    timeout $(( ${FUZZ_MEMCHECK_SECONDS:-60} + 300 )) "${CUDA_HOME}/bin/compute-sanitizer" --tool memcheck \
    --report-api-errors no --show-backtrace no --error-exitcode 86 \
    "$PY" tests/fuzz >"$LOGS/fuzz-memcheck.log" 2>&1;
 echo "fuzz exit $?" >>"$LOGS/fuzz-memcheck.log") &
FUZZ3=$!
PYTHONPATH="$PWD/src" OUT="$LOGS/san" SUITE_TIMEOUT="${SANITIZER_TIMEOUT:-300}" bash tools/gpu_suite.sh --no-build \
    --sanitizer memcheck,racecheck,synccheck >"$OUT/sanitizers.txt" 2>&1
echo "sanitizers exit $?" >>"$OUT/sanitizers.txt"
wait "$FUZZ2" "$FUZZ3"
grep -E "^== |SUMMARY|passed|failed|exit code|^(FAILED|ERROR) " "$OUT/sanitizers.txt" | head -40
for f in fuzz2 fuzz-memcheck; do
    echo "== $f"
    grep -E "^fuzz: [0-9]|fuzz exit|FAILED|ERROR SUMMARY|Falsifying|AssertionError|Fatal" "$LOGS/$f.log" | tail -8
done | tee "$OUT/fuzz-sanitizers.txt"
fi
if [[ "$STEPS" == *verify* ]]; then
# After a crash's fix: its seed replayed (FUZZ_SEED) in the release and the
# debug-refcounts builds, the tests named in VERIFY_TESTS, and beside them
# the whole suite on the free-threaded build (FT_BUNDLE; carry .ft), each
# test by name.
# In a copy: its in-place build must not rewrite this checkout's sources
# while the replays below run from it.
# FT_SKIP=1 leaves the free-threaded suite out (run it in a call of its own);
# VERIFY_SEED (default FUZZ_SEED) is the seed replayed.
FT=
if [ "${FT_SKIP:-0}" != 1 ]; then
rm -rf /tmp/streams-ft && cp -a "$ROOT" /tmp/streams-ft
(cd /tmp/streams-ft && OUT="$OUT/ft" FT_PYTEST_TIMEOUT="${FT_PYTEST_TIMEOUT:-400}" \
    timeout $(( ${FT_PYTEST_TIMEOUT:-400} + 120 )) \
    bash tools/free_threaded.sh gpu "${FT_BUNDLE:-.ft/py313t-bundle.tar}" tests \
    >"$OUT/ft.txt" 2>&1; echo "ft exit $?" >>"$OUT/ft.txt") &
FT=$!
fi
stackdump_preload
export STACKDUMP_ON_CRASH=1
pids=()
FUZZ_SEED="${VERIFY_SEED:-${FUZZ_SEED:-1}}" replay release 0 "$ROOT" & pids+=($!)
# The matrix's debug-refcounts build (same $DEBUG_DIR) serves when it ran first.
{ [[ "$STEPS" == *matrix* ]] && ls "$DEBUG_DIR"/src/streams/_cudart*.so >/dev/null 2>&1 \
    || build_debug_copy 8; } && { FUZZ_SEED="${VERIFY_SEED:-${FUZZ_SEED:-1}}" replay debug 0 "$DEBUG_DIR" & pids+=($!); }
PYTHONPATH="$ROOT/src" "$PY" -m pytest -q -p no:cacheprovider -rfEs ${VERIFY_TESTS:-tests/green/test_green_gpu.py} \
    >"$OUT/verify-tests.txt" 2>&1
echo "tests exit $?" >>"$OUT/verify-tests.txt"
wait "${pids[@]}"
unset STACKDUMP_ON_CRASH
stackdump_report
tail -3 "$OUT/verify-tests.txt"
for f in "$OUT"/replay-release.txt "$OUT"/replay-debug.txt; do
    [ -f "$f" ] && { echo "== $f"; grep -hE "^fuzz|Fatal|Falsif" "$f" "${f%.txt}-tail.txt" | tail -4; }
done
if [ -n "$FT" ]; then
wait "$FT"
{ grep -hE "^(FAILED|ERROR) |^=+ .*(passed|failed)" "$OUT/ft/ft-pytest.log"; grep -h "ft exit" "$OUT/ft.txt"; } | tail -12
fi
fi
if [[ "$STEPS" == *diagnose* ]]; then
# Hangs, diagnosed in one call: the whole suite on the
# free-threaded build (FT_BUNDLE, default .ft/py313t-bundle.tar; carry .ft)
# beside memcheck on the eight-thread tests and the fuzzer under memcheck,
# each with native stacks of what is still running past its bound.
(OUT="$OUT/ft" timeout "${FT_TIMEOUT:-420}" bash tools/free_threaded.sh gpu \
    "${FT_BUNDLE:-.ft/py313t-bundle.tar}" tests >"$OUT/ft.txt" 2>&1
 echo "ft exit $?" >>"$OUT/ft.txt") &
FT=$!
stackdump_preload
stackdump_after $(( ${FUZZ_MEMCHECK_SECONDS:-60} + 200 )) "tests/fuzz" fuzz-memcheck
(PYTHONPATH="$PWD/src" STREAMS_FUZZ_SECONDS="${FUZZ_MEMCHECK_SECONDS:-60}" STREAMS_FUZZ_SEED="${FUZZ_SEED:-3442}" \
    STREAMS_FUZZ_TRACE=1 timeout $(( ${FUZZ_MEMCHECK_SECONDS:-60} + 280 )) \
    "${CUDA_HOME}/bin/compute-sanitizer" --tool memcheck --report-api-errors no \
    --show-backtrace no --error-exitcode 86 "$PY" tests/fuzz \
    >"$LOGS/fuzz-memcheck.log" 2>&1; echo "fuzz exit $?" >>"$LOGS/fuzz-memcheck.log") &
FUZZ3=$!
OUT="$OUT/memcheck" SUITE_TIMEOUT="${SANITIZER_TIMEOUT:-300}" bash tools/gpu_suite.sh --no-build \
    --sanitizer memcheck tests/handle/test_free_threading_gpu.py tests/stream/test_enqueue_gil_gpu.py \
    >"$OUT/memcheck.txt" 2>&1
echo "memcheck exit $?" >>"$OUT/memcheck.txt"
wait "$FUZZ3" "$FT"
tail -3 "$OUT/memcheck.txt"
grep -E "^fuzz: [0-9]|fuzz exit|ERROR SUMMARY|Falsifying|AssertionError" "$LOGS/fuzz-memcheck.log" | tail -5
tail -3 "$LOGS/fuzz-memcheck.log" >"$OUT/fuzz-memcheck-tail.txt"
{ grep -hE "^(FAILED|ERROR) |^=+ .*(passed|failed)" "$OUT/ft/ft-pytest.log"; grep -h "ft exit" "$OUT/ft.txt"; } | tail -30
ls "$OUT"/stacks* "$OUT"/*/stacks* 2>/dev/null
fi
tar -czf "$OUT/logs-${STEPS// /-}.tar.gz" -C "$LOGS" . 2>/dev/null
pack_out
true

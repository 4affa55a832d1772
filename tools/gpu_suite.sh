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
#                       with libcudart_static.a; tools/stage_cuda12.py makes
#                       .cu12/ here, which the device call must carry)
#   --sanitizer TOOL    run pytest under compute-sanitizer --tool TOOL
#                       (memcheck, racecheck, synccheck, initcheck); its
#                       report goes to $OUT/sanitizer-TOOL.log
#
# Logs go to $OUT (if set) so they come back from the device machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/streams-out}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
SANITIZER=""
TAG="release"
while [ $# -gt 0 ]; do
    case "$1" in
        --debug-refcounts) export STREAMS_DEBUG_REFCOUNTS=1; TAG="debug"; shift ;;
        --cuda12) export CUDA_HOME="$(cd "$2" && pwd)" STREAMS_CUDA_MAJOR=12; TAG="cu12"; shift 2 ;;
        --sanitizer) SANITIZER="$2"; shift 2 ;;
        *) break ;;
    esac
done

echo "== nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== build ($TAG, CUDA_HOME=$CUDA_HOME)"
# One distribution owns `streams` at a time (cuda-streams or -cu12).
$PY -m pip uninstall -y -q cuda-streams cuda-streams-cu12 >/dev/null 2>&1 || true
if ! $PY -m pip install --no-build-isolation --no-deps -e . >"$OUT/build-$TAG.log" 2>&1; then
    tail -50 "$OUT/build-$TAG.log"
    echo "BUILD FAILED"
    exit 1
fi
$PY -c "import streams; print('streams', streams.__version__, 'devices', streams.device_count(), 'driver', streams.driver_version(), 'runtime', streams.runtime_version(), 'debug build', streams.debug_build())"
echo "== tests"
# A hang must not eat the whole call: per-test timeouts dump every thread's
# stack, and the suite as a whole stops before the device call's limit.
RUN=()
if [ -n "$SANITIZER" ]; then
    SAN="$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")"
    # Errors make the sanitizer exit 86 even when every test passed; child
    # processes (the subprocess tests) are followed too.
    RUN=("$SAN" --tool "$SANITIZER" --target-processes all --error-exitcode 86
         --log-file "$OUT/sanitizer-$SANITIZER.log" --print-limit 100)
fi
# No paths: pytest runs every suite of pyproject's testpaths.
timeout "${SUITE_TIMEOUT:-540}" "${RUN[@]}" $PY -m pytest -q -rs -p no:cacheprovider \
    --timeout=120 -o faulthandler_timeout=100 \
    --junitxml="$OUT/junit-$TAG${SANITIZER:+-$SANITIZER}.xml" "$@" 2>&1 \
    | tee "$OUT/pytest-$TAG${SANITIZER:+-$SANITIZER}.log"
exit "${PIPESTATUS[0]}"

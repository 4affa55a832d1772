#!/usr/bin/env bash
# Build in place and run the whole test suite on a GPU machine with no
# network (the device machine: CUDA at /usr/local/cuda, Cython, setuptools,
# pytest and the peer libraries preinstalled).  One call does everything:
#   bash tools/gpu_suite.sh [extra pytest args]
# Logs go to $OUT (if set) so they come back from the device machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/streams-out}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"

echo "== nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== build"
if ! $PY -m pip install --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1; then
    tail -50 "$OUT/build.log"
    echo "BUILD FAILED"
    exit 1
fi
$PY -c "import streams; print('streams', streams.__version__, 'devices', streams.device_count(), 'driver', streams.driver_version(), 'runtime', streams.runtime_version())"
echo "== tests"
# A hang must not eat the whole call: per-test timeouts dump every thread's
# stack, and the suite as a whole stops before the device call's limit.
timeout "${SUITE_TIMEOUT:-540}" $PY -m pytest tests -q -rs -p no:cacheprovider \
    --timeout=120 -o faulthandler_timeout=100 \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
exit "${PIPESTATUS[0]}"

# The common opening of the tools/gpu_*.sh scripts (sourced, not run): the
# checkout's root as the working folder ($ROOT), $OUT for what comes back
# from the device call, CUDA at /usr/local/cuda unless CUDA_HOME says
# otherwise, $PY the Python to build and test with.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
OUT="${OUT:-/tmp/streams-out}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"

# SPREAD: the pytest-xdist options for $1 workers, or none where xdist is
# not installed or $1 is 1.  A test that kills its worker is then reported
# as that test's failure while the rest go on (--max-worker-restart).
# A test past its --timeout then has its worker dump every thread's stack
# and exit (pytest-timeout's thread method): the test is reported by name
# and the rest go on.  The default signal method cannot stop a test whose
# main thread is blocked in C (a hang in the driver), and the whole suite
# then ran into the call's limit with no summary.
xdist_spread() {
    SPREAD=()
    if [ "$1" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
        SPREAD=(-n "$1" --max-worker-restart 40 --timeout-method=thread)
    fi
}

# stackdump_preload, stackdump_report, stackdump_after: native stacks of
# what hangs (tools/stackdump_env.sh).
source "$ROOT/tools/stackdump_env.sh"

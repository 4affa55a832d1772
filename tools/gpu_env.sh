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
xdist_spread() {
    SPREAD=()
    if [ "$1" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
        SPREAD=(-n "$1" --max-worker-restart 40)
    fi
}

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

# fresh_copy DEST: the checkout copied to DEST with its build outputs
# removed.  A copy of an in-place build would pass for its own: build_ext
# skips extensions whose .so is newer than their sources, whatever
# CUDA_HOME or STREAMS_DEBUG_REFCOUNTS say (a CUDA 12 suite then ran CUDA 13).
# Where the debug-refcounts build lives, a fresh_copy: gpu_matrix.sh makes
# it, and gpu_all.sh's verify step uses the matrix's when it ran first.
DEBUG_DIR=/tmp/streams-debug
fresh_copy() {
    rm -rf "$1" && cp -a "$ROOT" "$1" &&
        rm -rf "$1/build" "$1"/src/streams/*.so "$1"/src/streams/*.c
}

# pack_out: a device call brings back at most 8 files of $OUT, two folders
# deep at most (the device README).  Past that everything under $OUT goes
# into $OUT/all.tar.gz, and the top folder's .txt summaries stay beside it
# while they fit.  The scripts that own $OUT call it last.
pack_out() {
    local n
    n=$(find "$OUT" -type f | wc -l)
    [ "$n" -le 8 ] && return 0
    tar -czf /tmp/streams-all-out.tar.gz -C "$OUT" . || return 0
    local keep=/tmp/streams-out-summaries
    rm -rf "$keep" && mkdir -p "$keep"
    find "$OUT" -maxdepth 1 -type f -name '*.txt' -size -256k | head -7 | xargs -r cp -t "$keep"
    rm -rf "${OUT:?}"/*
    mv /tmp/streams-all-out.tar.gz "$OUT/all.tar.gz"
    cp "$keep"/* "$OUT"/ 2>/dev/null
    echo "== $n files under \$OUT: all of them in all.tar.gz"
}

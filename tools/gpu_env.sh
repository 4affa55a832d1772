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

# stackdump_preload: tools/stackdump.c built and preloaded into what runs
# next (the tests and their children), with a watchdog after
# STACKDUMP_AFTER seconds (default 90) per test (tests/conftest.py): every
# thread's native stack of a test that hangs goes to $OUT/stacks, and
# stackdump_report names the frames into $OUT/stacks.txt.  Without gcc,
# nothing is preloaded.
stackdump_preload() {
    local lib=/tmp/streams-libstackdump.so
    command -v gcc >/dev/null || return 0
    gcc -shared -fPIC -O1 -o "$lib" "$ROOT/tools/stackdump.c" || return 0
    mkdir -p "$OUT/stacks"
    export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" STACKDUMP_DIR="$OUT/stacks"
    export STREAMS_TEST_STACKDUMP_AFTER="${STACKDUMP_AFTER:-90}"
}

stackdump_report() {
    [ -n "$(ls "$OUT/stacks" 2>/dev/null)" ] || return 0
    (unset LD_PRELOAD; STACKDUMP_DIR="$OUT/stacks" bash "$ROOT/tools/stackdump.sh" --files \
        >"$OUT/stacks.txt" 2>&1)
    echo "native stacks of tests past ${STREAMS_TEST_STACKDUMP_AFTER:-90} s: $OUT/stacks.txt"
}

# stackdump_after SECONDS PATTERN NAME, in the background: after SECONDS,
# every Python process whose command line matches PATTERN (pgrep -f) and
# that still runs has its threads' native stacks written to
# $OUT/stacks-NAME-PID.txt (it must have been started after
# stackdump_preload).
stackdump_after() {
    (sleep "$1"
     for pid in $(pgrep -f "$2"); do
         case "$(cat /proc/"$pid"/comm 2>/dev/null)" in python*) ;; *) continue ;; esac
         grep -q stackdump /proc/"$pid"/maps 2>/dev/null || continue
         (unset LD_PRELOAD; STACKDUMP_DIR="$OUT/stacks" bash "$ROOT/tools/stackdump.sh" "$pid" 2 \
             >"$OUT/stacks-$3-$pid.txt" 2>&1)
     done) &
}

# The native-stack helpers of the GPU scripts (sourced, not run; no side
# effects): ci/run-gpu-tests and tools/free_threaded.sh source it.  They
# read $ROOT (the checkout) and $OUT (where the stacks go).

# stackdump_preload: tools/stackdump.c built and preloaded into what runs
# next (the tests and their children), with a watchdog after
# STACKDUMP_AFTER seconds (default 90) per test (tests/conftest.py): every
# thread's native stack of a test that hangs goes to $OUT/stacks, and
# stackdump_report names the frames into $OUT/stacks.txt.  Without gcc,
# nothing is preloaded.
stackdump_preload() {
    local lib=/tmp/streams-libstackdump.so
    case ":${LD_PRELOAD:-}:" in
    *":$lib:"*) ;;      # preloaded already: only where the stacks go changes
    *)  command -v gcc >/dev/null || return 0
        gcc -shared -fPIC -O1 -o "$lib" "$ROOT/tools/stackdump.c" || return 0
        export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" ;;
    esac
    mkdir -p "$OUT/stacks"
    export STACKDUMP_DIR="$OUT/stacks" STREAMS_TEST_STACKDUMP_AFTER="${STACKDUMP_AFTER:-90}"
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
         # Where that process writes its stacks: its own STACKDUMP_DIR.
         dir="$(tr '\0' '\n' </proc/"$pid"/environ | sed -n 's/^STACKDUMP_DIR=//p')"
         (unset LD_PRELOAD; STACKDUMP_DIR="${dir:-/tmp}" bash "$ROOT/tools/stackdump.sh" "$pid" 2 \
             >"$OUT/stacks-$3-$pid.txt" 2>&1)
     done) &
}

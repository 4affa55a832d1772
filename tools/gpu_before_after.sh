#!/usr/bin/env bash
# The same tests against the build of an earlier commit and against this
# checkout, side by side in one device call: what a fix's tests did before
# it and do after.  The earlier source comes as a folder (the device machine
# has no git history), e.g. made here with
#
#   git archive REV --prefix=.before/ | tar -x      (then carry .before)
#
#   bash tools/gpu_before_after.sh BEFORE_DIR TEST_PATH...
#
# Both are built in place side by side; each pytest imports its own build
# through PYTHONPATH (the tests, conftest and helpers are this checkout's).
# Logs: $OUT/build-{before,after}.log, $OUT/before.log, $OUT/after.log
# (OUT default /tmp/streams-before-after).
# WORKERS (default 8) pytest-xdist workers each.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD" OUT="${OUT:-/tmp/streams-before-after}" PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1
BEFORE_SRC="$(cd "$1" && pwd)"; shift
BEFORE=/tmp/streams-before
rm -rf "$BEFORE" && cp -a "$BEFORE_SRC" "$BEFORE"
(cd "$BEFORE" && "$PY" setup.py build_ext --inplace -j 8 >"$OUT/build-before.log" 2>&1;
 echo $? >/tmp/rc-build-before) &
"$PY" setup.py build_ext --inplace -j 8 >"$OUT/build-after.log" 2>&1; echo $? >/tmp/rc-build-after
wait
for v in before after; do
    if [ "$(cat /tmp/rc-build-$v)" != 0 ]; then tail -20 "$OUT/build-$v.log"; echo "BUILD FAILED: $v"; exit 1; fi
done
# Over pytest-xdist workers where it is installed: a test that kills its
# worker, or outlives --timeout (the thread method also stops a test blocked
# in C), is reported by name and the rest go on.
SPREAD=()
if [ "${WORKERS:-8}" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
    SPREAD=(-n "${WORKERS:-8}" --max-worker-restart 40 --timeout-method=thread)
fi
run() {   # run NAME SRC_DIR
    (cd "$2" && PYTHONPATH="$2/src:$2" timeout "${SUITE_TIMEOUT:-400}" "$PY" -m pytest -q -rfE \
        -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" --timeout=150 \
        "${SPREAD[@]}" "${TESTS[@]}" >"$OUT/$1.log" 2>&1; echo $? >"/tmp/rc-$1")
}
TESTS=()
for t in "$@"; do TESTS+=("$ROOT/$t"); done
run before "$BEFORE" &
run after "$ROOT" &
wait
for v in before after; do
    echo "== $v: exit $(cat /tmp/rc-$v)"
    grep -E "^(FAILED|ERROR) " "$OUT/$v.log" | cut -c1-220 | head -60
    tail -1 "$OUT/$v.log"
done

#!/usr/bin/env bash
# The whole test suite in the three builds at once, on a GPU machine with no
# network: release, --debug-refcounts and CUDA 12, each built in place in a
# copy of the checkout of its own (no pip install, so that no build shadows
# another), then the three suites side by side on the one GPU.  One device
# call instead of three; tools/gpu_suite.sh runs one build at a time (and
# the sanitizers).
#
#   bash tools/gpu_matrix.sh [CUDA12_DIR]     (default .cu12, made by
#                                              tools/build/stage_cuda12.py; the
#                                              device call must carry it)
#
# SUITE_TIMEOUT (default 300 s) bounds each suite; MATRIX_TESTS (default: the
# whole suite) names test files or ids instead, e.g. to rerun fixed tests.  MATRIX_WORKERS (default
# 4) pytest-xdist workers run each suite where xdist is installed: the three
# serial suites no longer fit one device call, and a test that kills its
# worker is reported as that test's failure while the rest go on
# (--max-worker-restart); 1 runs each suite in one process.  Logs go to
# $OUT: build-VARIANT.log and suite-VARIANT.log.  Exit status: 0 when every
# suite passed.
#
# A fourth suite runs after them on the free-threaded interpreter when its
# bundle is there (FT_BUNDLE, default .ft/py313t-bundle.tar from
# tools/free_threaded.sh pack; carry .ft): tools/free_threaded.sh gpu in a
# copy of its own, over MATRIX_FT_WORKERS (8) workers, its logs under
# $OUT/ft and its summary in suite-ft.log.  MATRIX_FT=0 leaves it out.
source "$(dirname "$0")/gpu_env.sh"
CU12="$(cd "${1:-.cu12}" && pwd)" || { echo "no CUDA 12 folder ${1:-.cu12}"; exit 2; }
VARIANTS=(release debug cu12)
declare -A DIR=([release]="$ROOT" [debug]="$DEBUG_DIR" [cu12]=/tmp/streams-cu12)
declare -A ENV=([release]="" [debug]="STREAMS_DEBUG_REFCOUNTS=1"
                [cu12]="CUDA_HOME=$CU12 STREAMS_CUDA_MAJOR=12")

FT_BUNDLE="$(realpath -m "${FT_BUNDLE:-$ROOT/.ft/py313t-bundle.tar}")"
FT=0
if [ "${MATRIX_FT:-1}" = 1 ] && [ -f "$FT_BUNDLE" ]; then
    FT=1
    DIR[ft]=/tmp/streams-ft
fi
for v in debug cu12 $([ $FT = 1 ] && echo ft); do
    fresh_copy "${DIR[$v]}"
done
echo "== build (in place, side by side)"
for v in "${VARIANTS[@]}"; do
    (cd "${DIR[$v]}" && env ${ENV[$v]} "$PY" setup.py build_ext --inplace -j 5 \
        >"$OUT/build-$v.log" 2>&1; echo $? >"/tmp/build-rc-$v") &
done
wait
for v in "${VARIANTS[@]}"; do
    if [ "$(cat "/tmp/build-rc-$v")" != 0 ]; then
        tail -30 "$OUT/build-$v.log"
        echo "BUILD FAILED: $v"
        exit 1
    fi
    (cd "${DIR[$v]}" && PYTHONPATH="${DIR[$v]}/src" "$PY" -c "import streams; print('$v:', 'runtime', streams.runtime_version(), 'debug build', streams.debug_build())")
done
echo "== tests (the three suites at once)"
xdist_spread "${MATRIX_WORKERS:-4}"
stackdump_preload
for v in "${VARIANTS[@]}"; do
    (cd "${DIR[$v]}" && PYTHONPATH="${DIR[$v]}/src" timeout "${SUITE_TIMEOUT:-300}" "$PY" -m pytest -q -rfEs \
        -p no:cacheprovider --timeout=120 -o faulthandler_timeout=100 "${SPREAD[@]}" ${MATRIX_TESTS:-} \
        >"$OUT/suite-$v.log" 2>&1; echo $? >"/tmp/suite-rc-$v") &
done
wait
if [ $FT = 1 ]; then
    # After the three, not beside them: with it beside them, all 16 cores
    # busy, the debug build's wake-up latency test missed its bound by
    # 390 us (H200).  Built
    # there (with the bundle's generated C when the sources match), then its
    # suite with the GIL off (the stack dumper preloaded above).
    echo "== the free-threaded suite"
    (cd "${DIR[ft]}" && OUT="$OUT/ft" FT_WORKERS="${MATRIX_FT_WORKERS:-8}" \
        FT_PYTEST_TIMEOUT="${SUITE_TIMEOUT:-300}" \
        bash tools/free_threaded.sh gpu "$FT_BUNDLE" ${MATRIX_TESTS:-tests} \
        >"$OUT/suite-ft.log" 2>&1; echo $? >/tmp/suite-rc-ft)
    VARIANTS+=(ft)
fi
stackdump_report
STATUS=0
for v in "${VARIANTS[@]}"; do
    rc="$(cat "/tmp/suite-rc-$v")"
    echo "== $v: exit $rc"
    grep -E "^(FAILED|ERROR) " "$OUT/suite-$v.log" | head -20
    tail -1 "$OUT/suite-$v.log"
    [ "$rc" = 0 ] || STATUS=1
done
pack_out
exit "$STATUS"

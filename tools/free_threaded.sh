#!/usr/bin/env bash
# streams on a free-threaded CPython (3.13t: built with --disable-gil).
#
#   tools/free_threaded.sh build  [PREFIX]   build the interpreter into PREFIX, unless
#                                            PREFIX/bin/python3.13t is there already
#                                            (about 2 min on 2 cores; Debian/Ubuntu, root)
#   tools/free_threaded.sh deps   [PREFIX]   install the test requirements into it (PyPI)
#   tools/free_threaded.sh check  [PREFIX] [pytest args]
#                                            build streams in place with it, assert that
#                                            `import streams` leaves the GIL off (without
#                                            PYTHON_GIL=0), run the CPU suite under it
#   tools/free_threaded.sh ci     [PREFIX] [pytest args]
#                                            build + deps + check (.ci/run calls this)
#   tools/free_threaded.sh pack   [PREFIX]   .ft/py313t-bundle.tar (about 30 MiB): the
#                                            interpreter, stripped, with what the tests need
#                                            installed in it (cp313t numpy, Cython, setuptools,
#                                            pytest, hypothesis and their deps, from PyPI's
#                                            wheels), and the generated C of the package,
#                                            for a GPU machine without network
#   tools/free_threaded.sh gpu    [BUNDLE] [pytest args]
#                                            on that machine (run from the checkout, CUDA at
#                                            /usr/local/cuda): unpack the bundle at the prefix
#                                            it was built for (nothing to install: no
#                                            network needed), build streams in place, assert
#                                            the GIL stays off, run the given test files
#                                            (default: the GPU suites that matter most
#                                            without a GIL; "tests" for all of them) with the
#                                            GIL off, over FT_WORKERS (8) xdist workers;
#                                            logs in $OUT
#
# PREFIX defaults to /opt/py313t.  The built streams modules carry the
# interpreter's own suffix (cpython-313t), so they sit beside a normal
# build in place without replacing it.
#
# The interpreter source is Debian's python3.13 source package: Debian 12's
# lists have no 3.13, so a source-only entry for the next release is added
# once, on the archive the machine's apt sources already name
# (tools/build/apt_archive.py; no binary package from it is installed).  pip
# comes from its PyPI wheel, run as a zip (the interpreter is configured
# without ensurepip).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The in-place build of the package (a src layout) for the interpreter,
# which has no streams installed.
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
cmd=${1:-}
shift || true

prefix_arg() {
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && [ "${1%.py}" = "$1" ] && [ "${1#tests/}" = "$1" ]; then
        echo "$1"
    else
        echo /opt/py313t
    fi
}

py_of() { echo "$1/bin/python3.13t"; }

build_interpreter() {
    local prefix=$1 work src
    if [ -x "$(py_of "$prefix")" ]; then
        echo "== free-threaded interpreter: reusing $(py_of "$prefix")"
        return
    fi
    echo "== free-threaded interpreter: building into $prefix"
    work=$(mktemp -d)
    if ! apt-cache showsrc python3.13 2>/dev/null | grep -q '^Version: 3.13'; then
        # The archive the machine already uses (its mirror, proxy or
        # snapshot), read from its own apt sources (tools/build/apt_archive.py).
        local archive uri signed
        archive=$(python3 "$ROOT/tools/build/apt_archive.py") || exit 1
        IFS=$'\t' read -r uri signed <<<"$archive"
        {
            echo "Types: deb-src"
            echo "URIs: $uri"
            echo "Suites: trixie"
            echo "Components: main"
            [ -z "$signed" ] || echo "Signed-By: $signed"
        } > /etc/apt/sources.list.d/python313-src.sources
        echo "== deb-src for trixie added on $uri"
    fi
    apt-get update -qq
    # What CPython's configure looks for (the modules the suite uses:
    # ssl-less is fine, but zlib, ctypes (libffi), bz2, lzma and sqlite are not).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        build-essential pkg-config zlib1g-dev libffi-dev libbz2-dev liblzma-dev \
        libssl-dev libsqlite3-dev libreadline-dev uuid-dev xz-utils dpkg-dev >/dev/null
    (cd "$work" && apt-get source --download-only python3.13 >/dev/null)
    tar xf "$work"/python3.13_*.orig.tar.xz -C "$work"
    src=$(ls -d "$work"/Python-3.13.*/)
    # No test modules: CPython's own test package and its C helpers are
    # neither built nor installed, nor byte-compiled three times by `make
    # install`; nothing of streams or its test requirements uses them.
    (cd "$src" &&
     ./configure --disable-gil --disable-test-modules --prefix="$prefix" --without-ensurepip \
         >"$work/configure.log" 2>&1 &&
     make -j"$(nproc)" >"$work/make.log" 2>&1 &&
     make install >"$work/install.log" 2>&1) || {
        tail -40 "$work"/*.log >&2
        exit 1
    }
    # pip's wheel, fetched by whichever pip is at hand (CI: its venv's).
    (cd "$work" && { python3 -m pip download -q --no-deps -d . pip 2>/dev/null ||
                     pip download -q --no-deps -d . pip; })
    local pipwhl
    pipwhl=$(ls "$work"/pip-*.whl)
    "$(py_of "$prefix")" "$pipwhl/pip" install -q "$pipwhl"
    rm -rf "$work"
    "$(py_of "$prefix")" -c 'import sys, sysconfig
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1, "not a free-threaded build"
print(sys.version)'
}

# Only binary wheels: hypothesis' newest sdist wants a Rust toolchain, and
# numpy's would compile for minutes.  Cython's cp313t wheel, or its
# pure-Python one, both work.  pytest-xdist and pytest-timeout: the whole
# GPU suite runs spread over workers on the GPU machine, with the per-test
# bound of the other builds.
REQUIREMENTS=(Cython setuptools pytest hypothesis numpy pytest-xdist pytest-timeout)

# Without a CUDA toolkit (CI), the build takes the headers and the static
# runtime from these (pyproject.toml's build-system.requires); on the GPU
# machine CUDA_HOME points at the toolkit instead.
CUDA_WHEELS=("nvidia-cuda-runtime==13.*" "nvidia-cuda-crt==13.*")

install_deps() {
    local py
    py=$(py_of "$1")
    if "$py" -c 'import Cython, setuptools, pytest, hypothesis, numpy, xdist, pytest_timeout, nvidia.cu13' 2>/dev/null; then
        echo "== test requirements: already there"
        return
    fi
    echo "== test requirements"
    "$py" -m pip install -q --only-binary=:all: "${REQUIREMENTS[@]}" "${CUDA_WHEELS[@]}"
}

# Build in place with the free-threaded interpreter.  The .c files of
# another Cython (or of a normal build made before a directive changed)
# translate the same for both interpreters: the build reuses them.
build_streams() {
    local py
    py=$(py_of "$1")
    echo "== streams: build in place with $py"
    "$py" setup.py build_ext --inplace -j"$(nproc)" >"${BUILD_LOG:-/tmp/streams-ft-build.log}" 2>&1 || {
        tail -60 "${BUILD_LOG:-/tmp/streams-ft-build.log}" >&2
        exit 1
    }
}

# Without PYTHON_GIL=0: a module that does not declare free-threading turns
# the GIL back on at import (and warns); every one of ours must declare it.
assert_gil_off() {
    local py
    py=$(py_of "$1")
    echo "== import streams leaves the GIL off"
    (unset PYTHON_GIL
     cd "$ROOT" && "$py" -W error::RuntimeWarning -c '
import sys
import streams, streams.testing  # noqa: F401  (every extension module)
import streams._cudart, streams._handle, streams._args, streams._device, streams._foreign
import streams._stream, streams._hostcall, streams._memory, streams._launch, streams._graph
assert not sys._is_gil_enabled(), "importing streams turned the GIL on"
print("GIL enabled:", sys._is_gil_enabled(), "| streams", streams.__version__)')
}

run_cpu_suite() {
    local py
    py=$(py_of "$1")
    shift
    echo "== CPU suite under the free-threaded interpreter"
    # The stub and docs checks need mypy and sphinx, which the suite skips
    # without; everything else runs.
    (unset PYTHON_GIL; "$py" -m pytest -q -p no:cacheprovider "$@")
}

BUNDLE_DIR="$ROOT/.ft"
BUNDLE="$BUNDLE_DIR/py313t-bundle.tar"

# What the generated C of the package is made from: a bundle's C files are
# used on the other side only if this matches there (else Cython runs).
sources_id() {
    (cd "$ROOT" && cat src/streams/*.pyx src/streams/*.pxd src/streams/*/*.pxi setup.py | sha256sum | cut -d' ' -f1)
}

# The bundle: the interpreter with the test requirements installed in it
# (numpy, Cython, setuptools, pytest, hypothesis and their dependencies, as
# cp313t/pure wheels from PyPI), stripped, in one xz tarball, plus the C that
# Cython generated here for the package.  Installed packages compress far
# better with xz than their wheels do (numpy: 9 MB instead of 17), which
# keeps the whole under the carry limit; the other side then needs no pip.
pack() {
    local prefix=$1 tmp name py site mib
    py=$(py_of "$prefix")
    name=$(basename "$prefix")
    [ -x "$py" ] || { echo "no interpreter at $py (run: $0 build $prefix)" >&2; exit 2; }
    if ! "$py" -c 'import Cython, setuptools, pytest, hypothesis, numpy' 2>/dev/null; then
        echo "== pack: installing the test requirements into $prefix"
        "$py" -m pip install -q --only-binary=:all: "${REQUIREMENTS[@]}"
    fi
    tmp=$(mktemp -d)
    mkdir -p "$BUNDLE_DIR" "$tmp/stage" "$tmp/c/c"
    echo "== pack: $prefix, stripped"
    cp -a "$prefix" "$tmp/stage/$name"
    site="lib/python3.13t/site-packages"
    (cd "$tmp/stage/$name" &&
     rm -rf lib/python3.13t/test lib/python3.13t/idlelib lib/python3.13t/tkinter \
            lib/python3.13t/turtledemo lib/python3.13t/ensurepip \
            lib/python3.13t/config-3.13t-*/libpython3.13t.a lib/libpython3.13t.a share \
            "$site"/nvidia "$site"/nvidia_* "$site"/pip "$site"/pip-* &&
     find . -name __pycache__ -type d -prune -exec rm -rf {} + &&
     find "$site" -path '*/tests' -type d -prune -exec rm -rf {} + &&
     (strip bin/python3.13t lib/python3.13t/lib-dynload/*.so 2>/dev/null || true))
    (cd "$tmp/stage" && tar cf - "$name" | xz -T0 -6 > "$tmp/interp.tar.xz")
    echo "$prefix" > "$tmp/PREFIX"
    # The generated C, when it is as fresh as its sources here.
    local fresh=1 f
    for f in "$ROOT"/src/streams/*.pyx; do
        [ -f "${f%.pyx}.c" ] && [ "${f%.pyx}.c" -nt "$f" ] || fresh=0
    done
    if [ $fresh = 1 ]; then
        cp "$ROOT"/src/streams/*.c "$tmp/c/c/"
        sources_id > "$tmp/c/c/SOURCES"
    else
        echo "   (no fresh generated C here: Cython will run on the other side)"
    fi
    rm -f "$BUNDLE"
    tar cJf "$tmp/c.tar.xz" -C "$tmp/c" c
    tar cf "$BUNDLE" -C "$tmp" PREFIX interp.tar.xz c.tar.xz
    rm -rf "$tmp"
    ls -la "$BUNDLE"
    mib=$(( $(stat -c %s "$BUNDLE") / 1048576 ))
    if [ "$mib" -ge 35 ]; then
        echo "warning: the bundle is ${mib} MiB: over the 35 MiB meant for a carry" >&2
    fi
}

# The GPU suites where a missing lock would show: several threads on shared
# streams, callbacks, closes from other threads, the refcounts.
DEFAULT_GPU_TESTS=(tests/handle/test_free_threading_gpu.py tests/handle/test_hostile_gpu.py
                   tests/handle/test_reliability_gpu.py tests/hostcall/test_callbacks_gpu.py
                   tests/stream/test_stream_gpu.py tests/stream/test_event_gpu.py
                   tests/stream/test_enqueue_gil_gpu.py tests/stream/test_handle_pools_gpu.py
                   tests/memory/test_memory_lifetimes_gpu.py)

gpu() {
    local bundle=$BUNDLE prefix py out log stamp want
    if [ $# -gt 0 ] && [ -f "$1" ]; then bundle=$1; shift; fi
    out=${OUT:-/tmp/streams-ft-out}
    mkdir -p "$out"
    [ -f "$bundle" ] || { echo "no bundle at $bundle (make it with: $0 pack)" >&2; exit 2; }
    prefix=$(tar xOf "$bundle" PREFIX)
    case "$prefix" in
    /?*/?*) ;;
    *) echo "refusing the bundle's prefix '$prefix' (want /DIR/NAME)" >&2; exit 2 ;;
    esac
    py=$(py_of "$prefix")
    stamp="$prefix/.streams-bundle"
    want=$(cksum < "$bundle" | cut -d' ' -f1)
    if [ -x "$py" ] && [ ! -f "$stamp" ]; then
        # An interpreter this script did not unpack (the machine that made
        # the bundle): used as it is, never replaced.
        echo "== using the interpreter already at $prefix"
    elif [ ! -x "$py" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "== unpacking the interpreter at $prefix"
        rm -rf "$prefix"
        mkdir -p "$(dirname "$prefix")"
        tar xOf "$bundle" interp.tar.xz | xz -d | tar xf - -C "$(dirname "$prefix")"
        echo "$want" > "$stamp"
    fi
    "$py" -c 'import Cython, setuptools, pytest, numpy' ||
        { echo "the bundle's interpreter lacks its packages" >&2; exit 2; }
    # Cython's pure-Python wheel is slow: the C generated where the bundle
    # was made is used when the sources are the same here.
    local cdir
    cdir=$(mktemp -d)
    tar xOf "$bundle" c.tar.xz | tar xJf - -C "$cdir" 2>/dev/null || true
    if [ -f "$cdir/c/SOURCES" ] && [ "$(cat "$cdir/c/SOURCES")" = "$(sources_id)" ]; then
        echo "== using the bundle's generated C (sources unchanged)"
        cp "$cdir"/c/*.c "$ROOT/src/streams/"
        touch "$ROOT"/src/streams/*.c
    else
        echo "== sources differ from the bundle's: Cython translates them here"
    fi
    rm -rf "$cdir"
    export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
    export PYTHONUNBUFFERED=1
    local t0=$SECONDS
    BUILD_LOG="$out/ft-build.log" build_streams "$prefix"
    echo "   built in $((SECONDS - t0)) s"
    assert_gil_off "$prefix" 2>&1 | tee "$out/ft-gil.log"
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    # FT_BUILD_ONLY=1: built and checked, no tests (tools/gpu_bench.sh times it).
    if [ "${FT_BUILD_ONLY:-0}" = 1 ]; then return 0; fi
    if [ $# -eq 0 ]; then set -- "${DEFAULT_GPU_TESTS[@]}"; fi
    # Spread over FT_WORKERS pytest-xdist workers (default 8; 1: one
    # process); a test past its bound is reported by name and its worker
    # replaced (the thread method also stops a test blocked in C).
    if [ "${FT_WORKERS:-8}" -gt 1 ] && "$py" -c "import xdist, pytest_timeout" 2>/dev/null; then
        set -- -n "${FT_WORKERS:-8}" --max-worker-restart 40 --timeout=150 \
            --timeout-method=thread -o faulthandler_timeout=140 "$@"
    fi
    log="$out/ft-pytest.log"
    # Native stacks of a test past 90 s (tools/stackdump_env.sh).
    source "$ROOT/tools/stackdump_env.sh"
    OUT="$out" stackdump_preload
    echo "== pytest with the GIL off: $*"
    # -v: each test by name as it ends, so a run cut short still says
    # which failed and which never ended; --durations: the slowest tests
    # (the free-threaded suite took past 340 s on 8 workers).
    # FT_PYTEST_TIMEOUT (seconds, 0: none) interrupts pytest like ^C,
    # which still prints its summary.
    (unset PYTHON_GIL; timeout -s INT -k 30 "${FT_PYTEST_TIMEOUT:-0}" \
        "$py" -X faulthandler -m pytest -v -p no:cacheprovider -rfEs --durations=30 \
        --junitxml="$out/ft-junit.xml" "$@") >"$log" 2>&1
    local rc=$?
    unset LD_PRELOAD
    OUT="$out" stackdump_report
    grep -E "^(FAILED|ERROR) " "$log" | head -40
    tail -3 "$log"
    return $rc
}

case "$cmd" in
build) build_interpreter "$(prefix_arg "$@")" ;;
deps) install_deps "$(prefix_arg "$@")" ;;
check)
    prefix=$(prefix_arg "$@")
    if [ $# -gt 0 ] && [ "$1" = "$prefix" ]; then shift; fi
    build_streams "$prefix"
    assert_gil_off "$prefix"
    run_cpu_suite "$prefix" "$@"
    ;;
ci)
    prefix=$(prefix_arg "$@")
    if [ $# -gt 0 ] && [ "$1" = "$prefix" ]; then shift; fi
    build_interpreter "$prefix"
    install_deps "$prefix"
    build_streams "$prefix"
    assert_gil_off "$prefix"
    run_cpu_suite "$prefix" "$@"
    ;;
pack) pack "$(prefix_arg "$@")" ;;
gpu) set +e; gpu "$@"; exit $? ;;
*)
    sed -n '2,/^set -euo/p' "$0" | grep '^#' >&2
    exit 2
    ;;
esac

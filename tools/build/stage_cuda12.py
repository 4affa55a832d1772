"""Stage a minimal CUDA 12 build input in .cu12/ for a machine without
network (the device machine), from the same PyPI wheels a CUDA 12 build
uses: nvidia-cuda-runtime-cu12 (headers, libcudart_static.a) and
nvidia-cuda-nvcc-cu12 (crt/host_defines.h only).

    python tools/build/stage_cuda12.py [--wheels DIR] [--dest .cu12]

then build with ``CUDA_HOME=.cu12 STREAMS_CUDA_MAJOR=12`` (``ci/run-gpu-tests
cuda12`` does, from .cu12 or CUDA12_HOME).
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

REQUIREMENTS = ["nvidia-cuda-runtime-cu12==12.*", "nvidia-cuda-nvcc-cu12==12.*"]


def _wheel(directory, stem):
    found = sorted(glob.glob(os.path.join(directory, f"{stem}-*.whl")))
    if not found:
        sys.exit(f"no {stem} wheel in {directory}")
    return found[-1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", help="a folder that already holds both wheels")
    p.add_argument("--dest", default=".cu12")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        wheels = args.wheels
        if not wheels:
            wheels = scratch
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--only-binary=:all:", "-d", wheels] + REQUIREMENTS, check=True)
        runtime = zipfile.ZipFile(_wheel(wheels, "nvidia_cuda_runtime_cu12"))
        nvcc = zipfile.ZipFile(_wheel(wheels, "nvidia_cuda_nvcc_cu12"))
        if os.path.isdir(args.dest):
            shutil.rmtree(args.dest)
        inc = os.path.join(args.dest, "include")
        lib = os.path.join(args.dest, "lib")
        os.makedirs(lib)
        for name in runtime.namelist():
            if name.startswith("nvidia/cuda_runtime/include/") and not name.endswith("/"):
                target = os.path.join(inc, name[len("nvidia/cuda_runtime/include/"):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(runtime.read(name))
            elif name.endswith("/libcudart_static.a"):
                with open(os.path.join(lib, "libcudart_static.a"), "wb") as f:
                    f.write(runtime.read(name))
        for name in nvcc.namelist():
            if name.startswith("nvidia/cuda_nvcc/include/crt/") and not name.endswith("/"):
                target = os.path.join(inc, "crt", os.path.basename(name))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(nvcc.read(name))
    needed = [os.path.join(inc, "cuda_runtime_api.h"), os.path.join(inc, "crt", "host_defines.h"),
              os.path.join(lib, "libcudart_static.a")]
    missing = [n for n in needed if not os.path.isfile(n)]
    if missing:
        sys.exit(f"staging incomplete, missing: {missing}")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.dest) for f in fs)
    print(f"{args.dest}: CUDA 12 headers and libcudart_static.a, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

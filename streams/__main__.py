"""``python -m streams``: what this build is and what it sees, then a short
benchmark of streams against the C floor.

    python -m streams            facts, then a quick benchmark of a few operations
    python -m streams --info     facts only (exit status 0 even without a GPU)
    python -m streams --version  the version only

Without a usable GPU it says why (CUDA's own words) and exits with status 1.
The full benchmark is ``python -m streams.bench``.
"""
import argparse
import sys

# Cheap operations that show the per-call overhead, one of each kind.
QUICK_OPS = ("stream_query", "stream_synchronize", "event_record", "kernel_launch",
             "host_func_round_trip")
QUICK_CONTENDERS = ("c", "streams-py")


def _version(v):
    return "unknown" if not v else f"{v // 1000}.{(v % 1000) // 10} ({v})"


def info_lines(info):
    """The facts of ``streams.bench.streams_info()`` as lines of text."""
    import platform
    try:
        import Cython
        installed = Cython.__version__
    except ImportError:
        installed = "not installed"
    lines = [
        f"streams {info['version'] or 'unknown'}",
        f"  Python:                {platform.python_version()} ({sys.executable})",
        f"  built with Cython:     {info['cython'] or 'unknown'} (installed: {installed})",
        f"  CUDA runtime (static): {_version(info['runtime_version'])}",
        "  debug build:           " + ("yes (STREAMS_DEBUG_REFCOUNTS: reference counts on)"
                                       if info.get("debug_build") else "no"),
        "  driver supports CUDA:  "
        + (_version(info['driver_version']) if info['driver_version'] else "none (no driver)"),
    ]
    if info["devices"]:
        lines.append(f"  devices:               {len(info['devices'])}")
        for dev in info["devices"]:
            major, minor = dev["compute_capability"]
            lines.append(f"    {dev['index']}: {dev['name']} (compute capability {major}.{minor})")
    else:
        lines.append("  devices:               none")
    if info["error"]:
        lines.append(f"  problem:               {info['error']}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m streams",
        description="Show what this streams build is and sees, then run a quick benchmark "
                    "(the full one: python -m streams.bench).")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--info", action="store_true", help="print the facts only, no benchmark")
    args = p.parse_args(argv)

    from streams import bench

    if args.version:
        import streams
        print(f"streams {streams.__version__}")
        return 0
    info = bench.streams_info()
    print("\n".join(info_lines(info)))
    sys.stdout.flush()
    if args.info:
        return 0
    if not info["device_count"]:
        print("\ncannot run the benchmark: no usable CUDA device ("
              + (info["error"] or "device_count() == 0") + ")", file=sys.stderr)
        return 1
    print("\nquick benchmark (streams and the C floor; the full one: python -m streams.bench)\n")
    sys.stdout.flush()
    return bench.main(["--quick", "--ops", ",".join(QUICK_OPS),
                       "--contenders", ",".join(QUICK_CONTENDERS)])


if __name__ == "__main__":
    sys.exit(main())

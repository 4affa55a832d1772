"""``python -m streams``: what this build is and what it sees, then a short
measurement of the per-call overhead.

    python -m streams            facts, then the launch overhead of a few operations
    python -m streams --info     facts only (exit status 0 even without a GPU)
    python -m streams --version  the version only

Without a usable GPU it says why (CUDA's own words) and exits with status 1.
It needs nothing outside the installed package; the full benchmark, against
a C program and the other CUDA libraries, is ``python -m benchmarks.run`` in
a source checkout.
"""
import argparse
import sys


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m streams",
        description="Show what this streams build is and sees, then measure the launch "
                    "overhead of a few operations (the full benchmark: python -m "
                    "benchmarks.run in a source checkout).")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--info", action="store_true", help="print the facts only, no measurement")
    args = p.parse_args(argv)

    import streams
    from streams._info import info_lines, streams_info

    if args.version:
        print(f"streams {streams.__version__}")
        return 0
    info = streams_info(streams.__version__)
    print("\n".join(info_lines(info)))
    sys.stdout.flush()
    if args.info:
        return 0
    if not info["device_count"]:
        print("\ncannot run the benchmark: no usable CUDA device ("
              + (info["error"] or "device_count() == 0") + ")", file=sys.stderr)
        return 1
    from streams import _quick

    print("\nlaunch overhead, from Python\n")
    sys.stdout.flush()
    return _quick.run(floor=_quick.extension_floor())


if __name__ == "__main__":
    sys.exit(main())

"""The fuzzer's command line (``python tests/fuzz --help``): each option sets
the STREAMS_FUZZ_* variable of the same knob, which machine.py reads when it
is imported.  Nothing here imports streams or hypothesis: ``--help`` needs
neither a GPU nor a build."""
import argparse

PROG = "python tests/fuzz"


def cli_env(argv):
    """The STREAMS_FUZZ_* variables that the command line ``argv`` sets.  An
    option left out leaves its variable as it is, so that the variables
    still configure a run (the pytest test passes them to its child)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="The stateful fuzzer of the object graph, on the GPU, in this process: "
                    "rounds of hypothesis examples until the time budget is spent.  Each "
                    "option sets the variable it names; without the option, the variable "
                    "applies.")
    p.add_argument("--seconds", type=float, metavar="S",
                   help="the time budget (STREAMS_FUZZ_SECONDS; default 60; 0 runs nothing)")
    seed = p.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, metavar="N",
                      help="the first round's seed (STREAMS_FUZZ_SEED; default: a random one, "
                           "printed first)")
    seed.add_argument("--replay", type=int, metavar="SEED",
                      help="replay the seed a failure printed, the failing example as it was "
                           "found: --seed SEED --shrink-seconds 0")
    p.add_argument("--shrink-seconds", type=int, metavar="S",
                   help="the bound on shrinking a failure (STREAMS_FUZZ_SHRINK_SECONDS; "
                        "default 60; 0: no shrinking)")
    p.add_argument("--trace", nargs="?", const="1", choices=("0", "1", "2"),
                   help="1 (the default): print the steps that build or drop objects as "
                        "they run; 2: also every rule with its arguments before it runs, "
                        "for a crash, which leaves no falsifying example (STREAMS_FUZZ_TRACE)")
    p.add_argument("--report", metavar="FILE",
                   help="write the last line, 'N examples, M steps in S seconds', to FILE "
                        "(STREAMS_FUZZ_REPORT)")
    p.add_argument("--device-memory", action="store_true",
                   help="check that the device's free memory is back at the end; only when "
                        "the fuzzer has the GPU to itself (STREAMS_FUZZ_DEVICE_MEMORY=1)")
    p.add_argument("--torch", action="store_true",
                   help="use PyTorch's streams too where it has CUDA (STREAMS_FUZZ_TORCH=1)")
    p.add_argument("--loose-names", action="store_true",
                   help="check only the type of a refused argument's exception, not that "
                        "its message names the argument (STREAMS_FUZZ_STRICT_NAMES=0)")
    args = p.parse_args(argv)
    env = {}
    if args.seconds is not None:
        env["STREAMS_FUZZ_SECONDS"] = format(args.seconds, "g")
    if args.replay is not None:
        env["STREAMS_FUZZ_SEED"] = str(args.replay)
        env["STREAMS_FUZZ_SHRINK_SECONDS"] = "0"
    if args.seed is not None:
        env["STREAMS_FUZZ_SEED"] = str(args.seed)
    if args.shrink_seconds is not None:
        env["STREAMS_FUZZ_SHRINK_SECONDS"] = str(args.shrink_seconds)
    if args.trace is not None:
        env["STREAMS_FUZZ_TRACE"] = args.trace
    if args.report is not None:
        env["STREAMS_FUZZ_REPORT"] = args.report
    if args.device_memory:
        env["STREAMS_FUZZ_DEVICE_MEMORY"] = "1"
    if args.torch:
        env["STREAMS_FUZZ_TORCH"] = "1"
    if args.loose_names:
        env["STREAMS_FUZZ_STRICT_NAMES"] = "0"
    return env



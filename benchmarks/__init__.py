"""Launch-overhead benchmark: streams next to its floor and its peers.

Run from a source checkout (see README.md here):

    python -m benchmarks.run [--quick] [--json PATH] [--png PATH]
                             [--ops a,b] [--contenders x,y] [--dry-run FILE]

Modules, each importing only those above it:

* ``ops``: what is measured (operations, targets) and by whom (contenders);
* ``under_test``: the streams under test: where it is, its facts, its PTX;
* ``builders``: the C program (``c_floor/bench.c``) and the Cython contender
  (``cy_bench.pyx``), compiled on demand;
* ``timing``: the timed loops and batches, as every worker runs them;
* ``adapters``: each contender's operations, inside its worker process;
* ``worker``: a worker's side of the request/answer protocol;
* ``results``: the result document: schema, validation, derived numbers;
* ``render``: the terminal table and the PNG chart;
* ``harness``: worker processes, rounds, the run as a whole;
* ``run``: the command line.
"""
import os
import sys

#: The source checkout that holds this package.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_streams_first():
    """Move the checkout behind every other sys.path entry unless its
    ``streams/`` is built in place.

    ``python -m benchmarks.run`` puts the checkout first on sys.path, and
    with it the source's ``streams/``: without a compiled module there, it
    would shadow an installed streams.
    """
    src = os.path.join(CHECKOUT, "streams")
    if "streams" in sys.modules or not os.path.isdir(src):
        return
    if any(name.endswith(".so") for name in os.listdir(src)):
        return
    here = [p for p in sys.path if os.path.abspath(p or os.curdir) == CHECKOUT]
    if here:
        sys.path[:] = [p for p in sys.path if p not in here] + here


_installed_streams_first()

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

``probes`` holds one-off measurements, not rows of the table
(``python -m benchmarks.probes.NAME``); they time with ``timing``.
"""
import os
import sys

#: The source checkout that holds this package.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_place_build_if_none_installed():
    """Put the checkout's ``src/`` on sys.path when no streams is installed
    and ``src/streams`` is built in place (``python setup.py build_ext
    --inplace``): an installed streams always comes first.

    The package is in ``src/`` (a src layout): ``python -m benchmarks.run``
    puts the checkout first on sys.path, where no ``streams`` folder can
    shadow an installed one.
    """
    import importlib.util
    src = os.path.join(CHECKOUT, "src")
    pkg = os.path.join(src, "streams")
    if "streams" in sys.modules or not os.path.isdir(pkg):
        return
    if importlib.util.find_spec("streams") is not None:
        return
    if any(name.startswith("_cudart.") and name.endswith(".so") for name in os.listdir(pkg)):
        sys.path.insert(0, src)


_in_place_build_if_none_installed()

"""``python tests/fuzz [--seconds S] [--seed N | --replay SEED] [--trace [1|2]]
...``: the fuzzer of the object graph, in this process, until its time
budget is spent (``--help`` lists every option; cli.py).  The command line
is read first, as the machine's settings come from the variables it sets;
then the machine (machine.py) runs, importing the ``streams`` this Python
finds, else the checkout's in-place build (as tests/conftest.py does).
Exit status: 0 when every round passed, 1 on a failure (its seed printed),
2 without a GPU."""
import importlib.util
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The fuzzer's modules, and the tests' shared helpers (tests/_support.py).
sys.path[:0] = [str(HERE), str(HERE.parent)]

from cli import cli_env  # noqa: E402

os.environ.update(cli_env(sys.argv[1:]))
_SRC = HERE.parents[1] / "src"
if importlib.util.find_spec("streams") is None and any((_SRC / "streams").glob("_cudart.*.so")):
    sys.path.insert(0, str(_SRC))

try:
    import machine
    code = machine.main()
except BaseException:
    traceback.print_exc()
    code = 1
sys.stdout.flush()
sys.exit(code)

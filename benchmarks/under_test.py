"""The streams under test: where it is, its facts, its kernels' PTX, and
the PYTHONPATH that gives a child Python the same one.

That is the streams this interpreter imports, an in-place build of this
checkout or an installed wheel, never the checkout's unbuilt source.
"""
import os

from benchmarks import CHECKOUT


def streams_parent():
    """The folder that holds the ``streams`` under test, or None where it
    does not import."""
    try:
        import streams
    except Exception:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(streams.__file__)))


def child_pythonpath(parent=None):
    """PYTHONPATH for a Python child: the streams under test (or the one in
    ``parent``, a baseline build) first, then this checkout (for
    ``benchmarks``), then what was there.

    The order matters where streams is installed: the checkout's own
    ``streams/`` has no compiled module then, and must not shadow it.
    """
    parts = [parent or streams_parent(), CHECKOUT, os.environ.get("PYTHONPATH")]
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


def baseline_problem(folder):
    """Why ``folder`` cannot serve as a baseline build of streams (None
    when it can): it must hold a ``streams`` package with its compiled
    call layer, as an in-place build of a checkout does."""
    if not folder:
        return "no baseline build given (--baseline DIR: an in-place build of another commit)"
    pkg = os.path.join(folder, "streams")
    if not os.path.isfile(os.path.join(pkg, "__init__.py")):
        return f"{folder} has no streams package"
    if not any(n.startswith(("_cudart.", "_core.")) and n.endswith((".so", ".pyd"))
               for n in os.listdir(pkg)):
        return f"{pkg} has no compiled module (build it in place first)"
    return None


def streams_facts():
    """streams' version, build and device facts (``streams._info``), or,
    where streams does not import, why; never raises."""
    try:
        import streams
        from streams._info import streams_info
    except Exception as exc:
        return {"device_count": 0, "devices": [],
                "error": f"cannot import streams: {type(exc).__name__}: {exc}"}
    return streams_info(streams.__version__)


def builtin_ptx():
    """The PTX text of streams' built-in kernels, from the streams under test.

    Taken, not copied: the floor and the peers launch exactly the kernels
    that streams launches.
    """
    from streams.testing import BUILTIN_PTX
    for entry in ("streams_empty", "streams_spin"):
        if f".entry {entry}(" not in BUILTIN_PTX:
            raise ValueError(f"streams.testing.BUILTIN_PTX has no kernel {entry}")
    return BUILTIN_PTX

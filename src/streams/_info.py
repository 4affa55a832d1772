"""What this build is and what it sees: the facts of ``show_config()`` and
``python -m streams``.

Imports the extension modules directly, never the package face, so that the face
(``show_config``) and ``python -m streams`` can both use it without an
import cycle.
"""
import platform
import sys

# The only extension imports of this module.
from streams._cudart import debug_build, driver_version, runtime_version
from streams._device import Device, device_count, get_device


def streams_info(version=None):
    """Version, build and device facts, as a dict (never raises).

    ``version`` is the package's version, which the caller knows (this
    module does not import the package face).
    """
    info = {"version": version, "cython": None, "debug_build": bool(debug_build()),
            "runtime_version": None, "driver_version": None, "device_count": 0,
            "devices": [], "error": None}
    # Cython 3 names its shared function type's module after its own
    # version (_cython_3_1_2): the version that compiled the extension, not
    # the one installed now.
    mod = type(device_count).__module__
    if mod.startswith("_cython_"):
        info["cython"] = mod[len("_cython_"):].replace("_", ".")
    try:
        info["runtime_version"] = runtime_version()
        info["driver_version"] = driver_version()
        info["device_count"] = device_count()
        for i in range(info["device_count"]):
            dev = Device(i)
            info["devices"].append({"index": i, "name": dev.name,
                                    "compute_capability": list(dev.compute_capability)})
        if info["device_count"] == 0:
            try:
                get_device()    # raises the plain-words reason
                info["error"] = "device_count() == 0"
            except Exception as exc:
                info["error"] = f"device_count() == 0: {exc}"
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def _version(v):
    return "unknown" if not v else f"{v // 1000}.{(v % 1000) // 10} ({v})"


def info_lines(info):
    """The facts of :func:`streams_info` as lines of text."""
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

"""The package imports quietly, says its version and CUDA major, and ships
its header for cimporters: no GPU needed."""
import pytest

from _support import run_python

import streams


def test_import_and_version():
    assert streams.__version__
    assert streams.runtime_version() // 1000 in (12, 13)


def test_runtime_major_matches_the_distribution_name():
    import json
    from importlib.metadata import distribution, packages_distributions
    from pathlib import Path
    from urllib.parse import unquote, urlparse
    owners = set(packages_distributions().get("streams", ())) & {"cuda-streams",
                                                                 "cuda-streams-cu12"}
    if len(owners) != 1:
        pytest.skip(f"streams is not installed as one distribution here ({sorted(owners)})")
    # Only if the streams imported here is the one installed: a build in
    # place in another checkout (a CUDA 12 copy of the checkout) is
    # imported first from its own folder while another build is installed.
    dist = distribution(next(iter(owners)))
    root = Path(dist.locate_file("")).resolve()
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    if origin.get("dir_info", {}).get("editable"):
        root = Path(unquote(urlparse(origin["url"]).path)).resolve()
    here = Path(streams.__file__).resolve()
    if root not in here.parents:
        pytest.skip(f"the streams imported here ({here.parent}) is not the installed "
                    f"{dist.metadata['Name']} ({root})")
    expected = 12 if owners == {"cuda-streams-cu12"} else 13
    assert streams.runtime_version() // 1000 == expected, owners


def test_import_in_fresh_interpreter_prints_nothing():
    out = run_python("import streams", timeout=60)
    assert out.returncode == 0
    assert out.stdout == "" and out.stderr == ""


def test_get_include_has_header():
    import os
    inc = streams.get_include()
    assert os.path.isfile(os.path.join(inc, "streams", "streams.h"))

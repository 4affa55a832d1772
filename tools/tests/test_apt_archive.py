"""tools/build/apt_archive.py: free_threaded.sh's deb-src entry goes on the Debian
archive the machine's apt sources already name, whatever their format."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "build" / "apt_archive.py"


@pytest.fixture
def apt():
    spec = importlib.util.spec_from_file_location("apt_archive_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


DEB822 = """Types: deb
# a snapshot, commented
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_deb822_sources_give_their_mirror_and_key(apt, tmp_path):
    root = _write(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert apt.debian_archive(root) == ("http://mirror.example.org/debian",
                                        "/usr/share/keyrings/debian-archive-keyring.gpg")


def test_one_line_sources_with_options(apt, tmp_path):
    root = _write(tmp_path, {"sources.list": (
        "# comment\n"
        "deb http://security.example.net/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/debian.gpg] "
        "http://proxy.example.net:3142/debian bookworm main\n")})
    assert apt.debian_archive(root) == ("http://proxy.example.net:3142/debian",
                                        "/etc/apt/keyrings/debian.gpg")


def test_other_archives_disabled_files_and_stanzas_are_skipped(apt, tmp_path):
    root = _write(tmp_path, {
        "sources.list.d/a-nodesource.sources": (
            "Types: deb\nURIs: https://deb.nodesource.example/node_20.x\nSuites: nodistro\n"
            "Components: main\n"),
        "sources.list.d/b-off.sources": (
            "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"
            "Components: main\n"),
        "sources.list.d/c-cloud.list.disabled": "deb http://cloud.example/apt bookworm main\n",
        "sources.list.d/d-debian.list": "deb http://ftp.example.de/debian/ trixie main\n"})
    assert apt.debian_archive(root) == ("http://ftp.example.de/debian/", None)


def test_the_script_prints_uri_and_key_or_says_what_it_read(tmp_path):
    root = _write(tmp_path / "ok", {"sources.list.d/debian.sources": DEB822})
    out = subprocess.run([sys.executable, str(TOOL), root], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout == ("http://mirror.example.org/debian\t"
                          "/usr/share/keyrings/debian-archive-keyring.gpg\n")
    empty = _write(tmp_path / "none", {"sources.list": "deb http://x.example/ubuntu noble main\n"})
    out = subprocess.run([sys.executable, str(TOOL), empty], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == ""
    assert "no Debian archive" in out.stderr and "sources.list" in out.stderr


def test_free_threaded_sh_writes_no_fixed_archive():
    script = (TOOL.parents[1] / "free_threaded.sh").read_text()
    assert "URIs: $uri" in script and "URIs: http" not in script
    assert "tools/build/apt_archive.py" in script

"""tools/stackdump.c and stackdump.sh: the native stack of every thread of
a running process, without a debugger.  No CUDA needed."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1]

CHILD = """
import sys, threading, time
ready = threading.Barrier(4)
stop = threading.Event()
def blocked():
    ready.wait()
    stop.wait()
threads = [threading.Thread(target=blocked) for _ in range(3)]
for t in threads:
    t.start()
ready.wait()
print("ready", flush=True)
sys.stdin.readline()
stop.set()
"""


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm")),
                    reason="needs gcc and nm (binutils)")
def test_every_thread_of_a_live_process_gives_its_native_stack(tmp_path):
    lib = tmp_path / "libstackdump.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib),
                    str(TOOLS / "stackdump.c")], check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib), STACKDUMP_DIR=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "ready"
        out = subprocess.run(["bash", str(TOOLS / "stackdump.sh"), str(child.pid), "1"],
                             env=env, capture_output=True, text=True, timeout=120).stdout
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0, "the dump must not disturb the process"
    assert f"== {child.pid}: 4 thread(s) dumped of 4" in out, out
    assert out.count("-- thread ") == 4, out
    # Each thread's stack starts in the handler and goes down to libc.
    assert out.count("on_signal") == 4, out
    assert "libc" in out

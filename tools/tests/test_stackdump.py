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


CRASH = """
import ctypes, faulthandler, threading
faulthandler.enable()
ready = threading.Barrier(3)
stop = threading.Event()
def blocked():
    ready.wait()
    stop.wait()
threads = [threading.Thread(target=blocked, daemon=True) for _ in range(2)]
for t in threads:
    t.start()
ready.wait()
ctypes.string_at(0)      # SIGSEGV
"""


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm")),
                    reason="needs gcc and nm (binutils)")
def test_a_crash_leaves_every_threads_native_stack(tmp_path):
    """STACKDUMP_ON_CRASH=1: a SIGSEGV writes every thread's stack, the
    faulting one down to the call that faulted, after faulthandler printed
    the Python frames, and the process still dies of the signal."""
    lib = tmp_path / "libstackdump.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib),
                    str(TOOLS / "stackdump.c")], check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib), STACKDUMP_DIR=str(tmp_path),
               STACKDUMP_ON_CRASH="1")
    child = subprocess.run([sys.executable, "-c", CRASH], env=env, capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == -11, (child.returncode, child.stderr[-2000:])
    assert "Fatal Python error: Segmentation fault" in child.stderr
    out = subprocess.run(["bash", str(TOOLS / "stackdump.sh"), "--files"],
                         env=dict(env, LD_PRELOAD=""), capture_output=True, text=True,
                         timeout=120).stdout
    assert "3 thread(s) dumped" in out, out
    assert out.count("on_crash") == 1 and out.count("on_signal") == 2, out
    assert "_ctypes" in out, out        # the faulting call's module

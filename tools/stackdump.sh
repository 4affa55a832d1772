#!/usr/bin/env bash
# Every thread's native stack of process PID, which runs with
# tools/stackdump.c preloaded (its header says how): one file per thread
# in STACKDUMP_DIR (default /tmp), printed here with each FILE(+OFFSET)
# frame named after the nearest symbol of FILE's symbol table (nm), where
# the frame itself came without a name.
#
#   bash tools/stackdump.sh PID [WAIT_SECONDS]
#   bash tools/stackdump.sh --files    every dump already in STACKDUMP_DIR
#                                      (the GPU scripts' watchdog's), named
set -u
dir="${STACKDUMP_DIR:-/tmp}"
if [ "$1" = --files ]; then
    for pid in $(ls "$dir" 2>/dev/null | sed -n 's/^stack-\([0-9]*\)-[0-9]*\.txt$/\1/p' | sort -u); do
        echo "== $pid: $(ls "$dir"/stack-"$pid"-*.txt | wc -l) thread(s) dumped"
        STACKDUMP_NAME_ONLY=1 bash "$0" "$pid"
    done
    exit 0
fi
pid="$1"
if [ -z "${STACKDUMP_NAME_ONLY:-}" ]; then
    rm -f "$dir"/stack-"$pid"-*.txt
    kill -USR2 "$pid" || exit 1
    sleep "${2:-1}"
    echo "== $pid: $(ls "$dir"/stack-"$pid"-*.txt 2>/dev/null | wc -l) thread(s) dumped of $(ls /proc/"$pid"/task 2>/dev/null | wc -l)"
fi
python3 - "$dir" "$pid" <<'PY'
import bisect, glob, re, subprocess, sys

directory, pid = sys.argv[1], sys.argv[2]
tables = {}

def symbols(path):
    """(addresses, names) of a file's functions, sorted; the dynamic table
    where the file is stripped."""
    if path not in tables:
        found = []
        for args in (["nm", "-n", "--defined-only", path], ["nm", "-D", "-n", "--defined-only", path]):
            try:
                out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.TimeoutExpired):
                out = ""
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "tTwW":
                    found.append((int(parts[0], 16), parts[2]))
            if found:
                break
        found.sort()
        tables[path] = ([a for a, _ in found], [n for _, n in found])
    return tables[path]

frame = re.compile(r"^(?P<file>[^(]+)\(\+0x(?P<off>[0-9a-f]+)\)")
for name in sorted(glob.glob(f"{directory}/stack-{pid}-*.txt")):
    print(f"-- thread {name.rsplit('-', 1)[1][:-4]}")
    for line in open(name):
        line = line.rstrip("\n")
        m = frame.match(line)
        if m:
            addrs, names = symbols(m["file"])
            off = int(m["off"], 16)
            i = bisect.bisect_right(addrs, off) - 1
            if i >= 0:
                line += f"   ~ {names[i]}+{off - addrs[i]:#x}"
        print(line)
PY

#!/usr/bin/env bash
# A job longer than one remote call, on a GPU machine reached through calls
# of bounded length: START=1 starts SCRIPT (default tools/gpu_all.sh)
# detached, in a session of its own, once per machine; every call then waits
# up to WAIT seconds (default 540) or until the job writes ALL.done, prints
# the progress lines it has not printed yet, and, where OUT names a folder,
# keeps a fresh res.tgz of the results there (also while it waits, so a
# call cut at its limit still brings back what was done).
#
#   START=1 bash tools/gpu_poll.sh      # the first call
#   bash tools/gpu_poll.sh              # each next call, before the machine idles out
set -u
RES=${RES:-/tmp/streams-gpu-all}
export RES
mkdir -p "$RES"
if [ -n "${START:-}" ] && [ ! -f "$RES/.started" ]; then
    touch "$RES/.started"
    setsid nohup bash "${SCRIPT:-tools/gpu_all.sh}" > "$RES/job.log" 2>&1 < /dev/null &
    sleep 2
fi
[ -f "$RES/.started" ] || { echo "no job on this machine (START=1 starts one)"; exit 3; }
pack() {
    [ -n "${OUT:-}" ] || return 0
    (cd "$RES" && find . -type f -size -6M | tar czf "$OUT/res.tgz.part" -T - 2>/dev/null &&
     mv "$OUT/res.tgz.part" "$OUT/res.tgz")
}
t0=$(date +%s)
shown=$(cat "$RES/.shown" 2>/dev/null || echo 0)
while :; do
    n=$(wc -l < "$RES/progress.txt" 2>/dev/null || echo 0)
    if [ "$n" -gt "$shown" ]; then
        sed -n "$((shown + 1)),${n}p" "$RES/progress.txt"
        shown=$n && echo "$shown" > "$RES/.shown"
    fi
    pack
    [ -f "$RES/ALL.done" ] && break
    [ $(( $(date +%s) - t0 )) -ge "${WAIT:-540}" ] && break
    sleep 8
done
printf '== %s: ' "$(date +%T)"
for f in "$RES"/*.rc; do [ -f "$f" ] && printf '%s=%s ' "$(basename "$f" .rc)" "$(cat "$f")"; done
echo
[ -f "$RES/ALL.done" ] && echo "ALL.done: $(head -1 "$RES/ALL.done")"
exit 0

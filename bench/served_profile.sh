#!/usr/bin/env bash
# Where the host time goes while `pagoda serve` streams 256 requests at a time on one GPU:
# py-spy samples the API process and the engine core process (--subprocesses) for
# SECONDS while every request of the served path's workload is in flight.
#   bash bench/served_profile.sh fp8 OUT     (or bf16; py-spy on PATH or in /tmp/site/bin)
# Writes OUT/profile-MODE.txt (collapsed stacks, one line a stack: `stack count`) and
# OUT/top-MODE.txt (per process: the functions sampled in, and those most on the stacks).
set -uo pipefail
mode=$1 out=$2 seconds=${SECONDS_SAMPLED:-15} checkpoint=${CHECKPOINT:-/tmp/llama8b}
export PYTHONUNBUFFERED=1 PATH=$PATH:/tmp/site/bin
source "$(dirname "$0")/served_server.sh"  # flags, pagoda, start_server
python -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || exit 1
[ -f "$checkpoint/model.safetensors" ] || pagoda bench write-model "$checkpoint" 2>&1 | tail -n 1
start_server
pagoda bench serve --base-url http://127.0.0.1:8000 --workload random-ids --vocab-size 128256 \
    --random-input-len 1088 --random-output-len 544 --random-range-ratio 0.88235294 --seed 0 \
    --ignore-eos --num-prompts 1000 --request-rate inf \
    --result-file "$out/served-$mode-profiled.json" >"$out/bench-$mode.log" 2>&1 &
bench=$!
sleep 20  # past the first prefills: the decode-heavy middle of the run
py-spy record --subprocesses --nonblocking -p $server -d "$seconds" -r 200 -f raw \
    -o "$out/profile-$mode.txt" >"$out/py-spy-$mode.log" 2>&1 || tail -n 5 "$out/py-spy-$mode.log"
wait $bench
grep -E "Output token throughput|Successful|Failed" "$out/bench-$mode.log"
kill $server; wait $server 2>/dev/null
python - "$out/profile-$mode.txt" <<'PY' | tee "$out/top-$mode.txt"
# Per process (the API server, and the engine core: the stacks with a second process in
# them), the functions the samples were in (self) and the ones on their stacks (inclusive).
# py-spy counts a thread waiting for the GIL or spinning in Event.synchronize as busy.
import collections, sys
totals, own, on_stack = collections.Counter(), {}, {}
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip().rpartition(" ")
    frames = stack.split(";")
    process = "engine core" if sum(f.startswith("process ") for f in frames) > 1 else "API server"
    body, count = [f for f in frames if not f.startswith("process ")], int(count)
    totals[process] += count
    own.setdefault(process, collections.Counter())[body[-1] if body else "?"] += count
    for frame in set(body):
        on_stack.setdefault(process, collections.Counter())[frame] += count
for process, total in totals.most_common():
    print(f"== {process}: {total} samples")
    for title, counter, rows in (("self", own, 20), ("inclusive", on_stack, 40)):
        print(f"-- {title}")
        for frame, count in counter[process].most_common(rows):
            print(f"{100 * count / total:5.1f}%  {frame[:140]}")
PY

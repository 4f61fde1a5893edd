#!/usr/bin/env bash
# The served path on one GPU (workload 3 of ../shared/BENCHMARKS.md): the same requests
# offline (`pagoda bench throughput`) and through `pagoda serve` + `pagoda bench serve`,
# random 128-2048 prompt tokens and 64-1024 output tokens, on one on-disk benchmark
# checkpoint (random weights, a tokenizer covering the whole vocabulary). One device call
# a mode (each under 10 minutes):
#   bash bench/served_path.sh bf16 OUT   bf16 weights, bf16 KV cache
#   bash bench/served_path.sh fp8 OUT    FP8 weights (quantised at load), fp8 KV cache
# Per mode: the offline run on NUM requests, the server with every request at once
# (rate inf, NUM requests: the offline comparison), then at RATE requests a second
# (RATED requests: near saturation, for the inter-token latency). Result files land under
# OUT; the checkpoint is written once to CHECKPOINT (kept while the machine is).
set -uo pipefail
mode=$1 out=$2
num=${NUM:-1000} rated=${RATED:-600} rate=${RATE:-12} checkpoint=${CHECKPOINT:-/tmp/llama8b}
export PYTHONUNBUFFERED=1 PAGODA_COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
source "$(dirname "$0")/served_server.sh"  # flags, pagoda, start_server
python -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

lengths=(--seed 0)  # mean 1088 / 544, ratio 15/17: [128, 2048] and [64, 1024]
if [ ! -f "$checkpoint/model.safetensors" ]; then
    start=$(date +%s)
    pagoda bench write-model "$checkpoint" 2>&1 | tail -n 1
    echo "checkpoint written in $(($(date +%s) - start)) s"
fi

pagoda bench throughput --model-dir "$checkpoint" --backend pagoda "${flags[@]}" \
    --num-prompts "$num" --input-len 1088 --output-len 544 --range-ratio 0.88235294 \
    "${lengths[@]}" --out "$out/offline-$mode" 2>&1 | grep -E "^  pagoda|^wrote|Error"
python - "$out/offline-$mode" <<'EOF'
import json, pathlib, sys
path = next(pathlib.Path(sys.argv[1]).glob("*.json"))
f = json.loads(path.read_text())["figures"]["pagoda"]
print(f"offline: {f['output_tokens_per_s']:.0f} output tok/s, {f['requests'] / f['elapsed_s']:.2f} "
      f"req/s, decode step {f.get('decode_step_ms', float('nan')):.2f} ms")
EOF

start_server
serve() {  # serve NAME NUM RATE
    pagoda bench serve --base-url http://127.0.0.1:8000 --workload random-ids \
        --vocab-size 128256 --random-input-len 1088 --random-output-len 544 \
        --random-range-ratio 0.88235294 "${lengths[@]}" --ignore-eos \
        --num-prompts "$2" --request-rate "$3" --result-file "$out/served-$mode-$1.json" \
        >"$out/served-$mode-$1.log" 2>&1
    python - "$out/served-$mode-$1.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ms = lambda key, p: r[key].get(f"p{p}_ms", float("nan"))
print(f"served {sys.argv[2]}: {r['completed']} ok, {r['failed']} failed, "
      f"{r['output_token_throughput']:.0f} output tok/s, {r['request_throughput']:.2f} req/s, "
      f"TTFT p50 {ms('ttft', 50):.0f} p99 {ms('ttft', 99):.0f} ms, TPOT p50 {ms('tpot', 50):.2f}, "
      f"ITL p50 {ms('itl', 50):.2f} p99 {ms('itl', 99):.2f} ms, chunks/token "
      f"{r['total_chunks'] / max(1, r['total_output_tokens']):.3f}", r["errors"] or "")
EOF
}
serve inf "$num" inf
[ "$rated" -gt 0 ] && serve "rate$rate" "$rated" "$rate"  # RATED=0: the offline comparison only
kill $server; wait $server 2>/dev/null

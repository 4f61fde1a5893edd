#!/usr/bin/env bash
# Throughput (workload 1 of ../shared/BENCHMARKS.md: 1000 x (1024 in, 1024 out)) at
# several settings one after the other on one GPU, each beside the others in the same
# call, after the decode kernel against an earlier commit's (bench/decode_against_commit.py):
#   bash bench/running_batch.sh OUT PEER_COMMIT NAME="FLAGS" [NAME="FLAGS" ...]
# e.g. fp8w-256="--quantization fp8 --kv-cache-dtype fp8 --max-num-seqs 256". PEER_COMMIT
# may also be a copy of that commit's engine/kernels/triton_decode.py; "-" skips the kernel
# comparison. Result files land under OUT/NAME/; each run's summary prints as it ends.
set -uo pipefail
out=$1 peer=$2
shift 2
export PYTHONUNBUFFERED=1 PAGODA_COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
pagoda() { python -c 'import sys; from pagoda.cli import main; sys.exit(main())' "$@"; }
logs=$(mktemp -d)  # the device returns few files: OUT keeps the result files
python -m pip install -q --no-deps --no-build-isolation -e . >"$logs/pip.log" 2>&1 || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

if [ "$peer" != - ]; then
    [ -f "$peer" ] && peer=$(realpath "$peer")  # a copy of the peer's triton_decode.py
    (cd bench && python decode_against_commit.py "$peer") >"$out/decode-kernel.md" 2>&1
    sed -n '/^| cache/,$p' "$out/decode-kernel.md"
fi
for run in "$@"; do
    name=${run%%=*} flags=${run#*=}
    start=$(date +%s)
    # shellcheck disable=SC2086  # the flags are words
    pagoda bench throughput --backend pagoda $flags --out "$out/$name" >"$logs/$name.log" 2>&1
    python - "$out/$name" "$name" "$(($(date +%s) - start))" <<'EOF' || tail -n 5 "$logs/$name.log"
import json, pathlib, sys
path = next(pathlib.Path(sys.argv[1]).glob("*.json"))
f = json.loads(path.read_text())["figures"]["pagoda"]
p = f.get("profile", {})
print(f"{sys.argv[2]}: {f['output_tokens_per_s']:.0f} output tok/s, elapsed {f['elapsed_s']:.1f} s "
      f"(decode graphs {p.get('steps_decode_graph', 0):.0f} steps {p.get('device_s_decode_graph', 0):.1f} s, "
      f"eager {p.get('steps_eager', 0):.0f} steps {p.get('device_s_eager', 0):.1f} s, "
      f"between {p.get('between_steps_s', 0):.1f} s), decode step "
      f"{f.get('decode_step_ms', float('nan')):.2f} ms; wall {sys.argv[3]} s")
EOF
    grep -hE "KV cache:|captured" "$logs/$name.log" | sed 's/^/    /'
done

#!/usr/bin/env bash
# Throughput (workload 1 of ../shared/BENCHMARKS.md: 1000 x (1024 in, 1024 out)) at
# several settings, one after the other on one GPU, after the decode kernel against
# earlier ones (bench/decode_against_commit.py) when PEERS names them:
#   PEERS="c9619b3 .peer/variant.py" bash bench/running_batch.sh OUT NAME="FLAGS" ...
# e.g. fp8w-256="--quantization fp8 --kv-cache-dtype fp8 --max-num-seqs 256". A peer is a
# commit or a copy of engine/kernels/triton_decode.py (for a machine whose clone lacks the
# commit). Result files land under OUT/NAME/; each run's summary prints as it ends.
set -uo pipefail
out=$1
shift
export PYTHONUNBUFFERED=1 PAGODA_COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
pagoda() { python -c 'import sys; from pagoda.cli import main; sys.exit(main())' "$@"; }
logs=$(mktemp -d)  # the device returns few files: OUT keeps the result files
python -m pip install -q --no-deps --no-build-isolation -e . >"$logs/pip.log" 2>&1 || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

if [ -n "${PEERS:-}" ]; then
    peers=()
    for peer in $PEERS; do [ -f "$peer" ] && peers+=("$(realpath "$peer")") || peers+=("$peer"); done
    (cd bench && python decode_against_commit.py "${peers[@]}") >"$out/decode-kernel.md" 2>&1
    sed -n '/^| cache/,$p' "$out/decode-kernel.md"
    grep -E "Error|error:" "$out/decode-kernel.md" | tail -n 3
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
      f"between {p.get('between_steps_s', 0):.1f} s: idle before decode "
      f"{p.get('idle_s_before_decode_graph', 0):.1f} s, before eager {p.get('idle_s_before_eager', 0):.1f} s, "
      f"after decode {p.get('idle_s_after_decode_graph', 0):.1f} s, after eager {p.get('idle_s_after_eager', 0):.1f} s, "
      f"{p.get('idle_s_in_waits_over_1ms', 0):.1f} s in {p.get('waits_over_1ms', 0):.0f} waits over 1 ms, "
      f"longest {p.get('longest_idle_ms', 0):.0f} ms), decode step "
      f"{f.get('decode_step_ms', float('nan')):.2f} ms, {f.get('preemptions', '?')} preempted; "
      f"wall {sys.argv[3]} s")
EOF
    grep -hE "KV cache:|captured" "$logs/$name.log" | sed 's/^/    /'
done

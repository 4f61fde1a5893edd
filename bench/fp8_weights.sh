#!/usr/bin/env bash
# FP8 weights on one H200, one device call a stage (each under 10 minutes):
#   bash bench/fp8_weights.sh check OUT       GPU tests, the W8A8 sweep, batch-1 decode
#                                             bf16 vs FP8 weights, accuracy vs bf16
#   bash bench/fp8_weights.sh final OUT       the kernel tests and the few-rows sweep again,
#                                             then what `throughput` runs
#   bash bench/fp8_weights.sh latency OUT     the kernel tests, then batch-1 decode
#   bash bench/fp8_weights.sh throughput OUT  batch-1 decode again, then 1000 x (1024 in,
#                                             1024 out) with an fp8 KV cache: bf16
#                                             weights, then FP8 weights
# Each stage checks before it times; result files land under OUT.
set -uo pipefail
stage=$1 out=$2
export PYTHONUNBUFFERED=1 PAGODA_COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
pagoda() { python -c 'import sys; from pagoda.cli import main; sys.exit(main())' "$@"; }
python -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

if [ "$stage" = check ]; then
    python -m pytest -q -p no:cacheprovider -m gpu tests/engine/layers/test_fp8.py \
        tests/engine/kernels/test_skinny_matmul.py tests/engine/kernels/test_plan.py \
        tests/engine/loader/test_fp8_quantization.py tests/engine/loader/test_fp8_checkpoints.py \
        --tb=short >"$out/gpu-tests.txt" 2>&1
    grep -E "^E |passed|failed" "$out/gpu-tests.txt" | head -n 20
    python bench/fp8_linear_sweep.py --out "$out/linear-sweep.md" 2>&1 | tail -n 40
    for weights in bf16 fp8; do
        flag=(); [ "$weights" = fp8 ] && flag=(--quantization fp8)
        pagoda bench latency --backend pagoda "${flag[@]}" --out "$out/latency-$weights" \
            2>&1 | grep -E "^  pagoda|^wrote|Error" | grep -vE "samples|end_to_end"
    done
    python bench/fp8_accuracy.py --out "$out/accuracy.json" >"$out/accuracy.log" 2>&1
    python -c "import json,sys; f=json.load(open(sys.argv[1])); [print(k, v['next_token'], {g: v['greedy'][g] for g in ('identical','near_ties','diverged')}) for k, v in f.items() if k != 'settings']" "$out/accuracy.json" || tail -n 20 "$out/accuracy.log"
fi
if [ "$stage" = final ] || [ "$stage" = latency ]; then  # after the kernel changes: their tests and sweep, then all
    python -m pytest -q -p no:cacheprovider -m gpu tests/engine/layers/test_fp8.py \
        tests/engine/kernels/test_skinny_matmul.py tests/engine/loader/test_fp8_quantization.py \
        --tb=short >"$out/gpu-tests.txt" 2>&1
    grep -E "^E |passed|failed" "$out/gpu-tests.txt" | head -n 20
    [ "$stage" = latency ] && tail -n 3 "$out/gpu-tests.txt"
    [ "$stage" = final ] && python bench/fp8_linear_sweep.py --few-rows-only \
        --out "$out/few-rows-sweep.md" 2>&1 | tail -n 14
fi
if [ "$stage" != check ]; then
    for weights in bf16 fp8; do
        flag=(); [ "$weights" = fp8 ] && flag=(--quantization fp8)
        pagoda bench latency --backend pagoda "${flag[@]}" --out "$out/latency-$weights" \
            2>&1 | grep -E "^  pagoda|^wrote|Error" | grep -vE "samples|end_to_end"
    done
fi
if [ "$stage" = throughput ] || [ "$stage" = final ]; then
    for weights in bf16 fp8; do
        flag=(); [ "$weights" = fp8 ] && flag=(--quantization fp8)
        pagoda bench throughput --backend pagoda --kv-cache-dtype fp8 "${flag[@]}" \
            --out "$out/throughput-$weights" 2>&1 | grep -E "^  pagoda|^wrote|Error"
    done
fi

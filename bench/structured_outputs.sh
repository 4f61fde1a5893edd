#!/usr/bin/env bash
# Structured outputs on one H200 (one device call): the structured-output tests on the
# GPU (xgrammar's CUDA mask kernel) and those of the sampling inputs built after the
# forward is queued (grammars, penalties, bad words; asynchronous scheduling), then 1000 x (1024 in, up to 1024 out) with half of
# the requests under a JSON schema, against the same requests unconstrained at the same
# lengths, in the same run. Needs xgrammar, pydantic and jsonschema (carried as wheels).
set -uo pipefail
out=$1
export PYTHONUNBUFFERED=1 PAGODA_COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
python -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python -m pytest -q -p no:cacheprovider --tb=short tests/engine/structured_output \
    tests/engine/engine_core/test_async_scheduling.py tests/engine/frontend/test_vocabulary_params.py \
    >"$out/gpu-tests.txt" 2>&1
grep -E "^E |passed|failed" "$out/gpu-tests.txt" | head -n 20
python -c 'import sys; from pagoda.cli import main; sys.exit(main())' bench throughput \
    --backend pagoda --structured-share 0.5 --out "$out" 2>&1 | grep -vE "^\s*$" | tail -n 40

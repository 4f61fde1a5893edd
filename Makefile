# Pagoda's dev loop. `make setup` builds .venv on a fresh machine; every other target
# depends on it, so `make run` and `make test` work straight after a clone.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TINY_MODEL := .cache/tiny-llama
PORT ?= 8000

.PHONY: setup test soak lint format run clean generate

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# A CPU-only machine prefers the small CPU build of torch when its index is reachable;
	@# otherwise PyPI's default build (which also runs on CPU) is installed below.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/pip install --quiet --retries 0 --timeout 15 --index-url $(TORCH_CPU_INDEX) \
			"torch==$(TORCH_VERSION)" 2>/dev/null \
		&& echo "installed the CPU build of torch $(TORCH_VERSION)" \
		|| echo "the CPU build of torch is not reachable here; installing PyPI's default build"; \
	fi
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

test: setup k8s-tools
	$(BIN)/pytest

# The autoscaler under 10 minutes of noisy load, then three cold starts from zero: a
# benchmark (bench/results/<date>-cpu-autoscaler-soak.json), not part of `make test`.
soak: setup k8s-tools
	$(BIN)/pytest -m soak -s tests/e2e/test_autoscaler_soak.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pagoda.engine.tools.layering

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

$(TINY_MODEL)/config.json: | setup
	$(BIN)/pagoda make-tiny-model $(TINY_MODEL) --arch llama

# Serves the tiny model over the OpenAI API on loopback; Ctrl-C drains and stops it.
run: setup $(TINY_MODEL)/config.json
	@echo "Serving $(TINY_MODEL) as 'tiny' on http://127.0.0.1:$(PORT). From another shell:"
	@echo "  curl http://127.0.0.1:$(PORT)/v1/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"tiny\", \"prompt\": \"The paged KV cache lets a server\", \"max_tokens\": 32}'"
	@echo "  curl http://127.0.0.1:$(PORT)/metrics"
	OMP_NUM_THREADS=1 $(BIN)/pagoda serve $(TINY_MODEL) --host 127.0.0.1 --port $(PORT) \
		--served-model-name tiny

# The CRDs in crds/ and charts/pagoda/ come from the typed API in operator/api/;
# tests/operator/test_generated.py fails when they are stale.
generate: setup
	$(BIN)/python -P -m pagoda.operator.api.generate

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis

include e2e/cluster.mk

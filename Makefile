# Pagoda's dev loop. `make setup` builds .venv on a fresh machine; every other target
# depends on it, so `make run` and `make test` work straight after a clone.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
PORT ?= 8000
# The demo model (pagoda make-demo-model) lives in Pagoda's cache, beside the Kubernetes tools.
PAGODA_CACHE_DIR := $(or $(PAGODA_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pagoda)
DEMO_MODEL ?= $(PAGODA_CACHE_DIR)/demo/smollm2-135m
DEMO_STATE := .cache/demo

.PHONY: setup test soak lint format run run-intro stop serve demo-model prometheus grafana-schema \
	client-envs clean generate images images-push image-tools

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

test: setup k8s-tools demo-model prometheus grafana-schema image-tools client-envs
	@# the images the image tests run (they skip, saying why, where nothing can build them)
	@$(PYTHON) images/build.py --if-possible
	$(BIN)/pytest

# Grafana's dashboard types and tsc (npm), which the dashboards' schema test runs.
grafana-schema: setup
	@$(BIN)/python -m tests.operator.observability.grafana_schema

# lm-eval and litellm in venvs of their own (their pins clash with the dev venv's), which
# the API tests run against the server: a no-op once in the cache.
client-envs: setup
	@$(BIN)/python -m tests.engine.entrypoints.client_envs

# promtool, which the alert rules' tests run (and Prometheus, which `make run` starts when
# installed): Debian's package, installed when missing and this is a root Debian machine.
prometheus:
	@command -v promtool >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian's prometheus package (promtool, for the alert tests)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends prometheus >/dev/null; \
		else \
			echo "promtool is missing (the alert tests will skip): install Prometheus"; \
		fi; }

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

# SmolLM2-135M-Instruct and its LoRA adapter: a no-op in a few seconds once made.
demo-model: setup
	@$(BIN)/pagoda make-demo-model $(DEMO_MODEL) --adapter

# The product on this machine (e2e/demo.py): the local cluster, the chart, the demo
# model's InferenceService behind the router, Prometheus; Ctrl-C or `make stop` ends it.
run: run-intro setup k8s-tools demo-model
	@$(E2E_CLI) --state-dir $(DEMO_STATE) demo --model $(DEMO_MODEL)

run-intro:
	@echo "make run: a first run builds .venv (~3 min), the Kubernetes tools (~14 min on two"
	@echo "cores) and the demo model (~2 min), then starts; a later run is up in about 35 s."

stop: setup
	@$(E2E_CLI) --state-dir $(DEMO_STATE) demo-stop

# The engine alone: the demo model and its adapter over the OpenAI API on loopback.
serve: setup demo-model
	@echo "Serving $(DEMO_MODEL) as 'smollm2' (adapter 'sonnets') on http://127.0.0.1:$(PORT)"
	OMP_NUM_THREADS=2 $(BIN)/pagoda serve $(DEMO_MODEL) --host 127.0.0.1 --port $(PORT) \
		--served-model-name smollm2 --enable-lora \
		--lora-modules sonnets=$(DEMO_MODEL)/adapters/sonnets

# The serving images (images/README.md): docker build where a Docker engine answers,
# else buildah on a base that mmdebstrap makes; a no-op when the images of this checkout
# are built. Tagged with the version and the commit.
images: image-tools
	@$(PYTHON) images/build.py

# make images-push REGISTRY=registry.example.com/pagoda [TLS_VERIFY=false]: builds first
images-push: image-tools
	@test -n "$(REGISTRY)" || { echo "images-push: set REGISTRY=host[:port][/path]"; exit 2; }
	@$(PYTHON) images/build.py
	@$(PYTHON) images/build.py --push $(REGISTRY) --tls-verify=$(or $(TLS_VERIFY),true)

# buildah, podman, skopeo, mmdebstrap and runc from Debian when there is no Docker engine
# and this is a root Debian machine (the image tests skip where podman is missing), and
# docker-registry, the registry the push test pushes to.
IMAGE_TOOLS := buildah podman skopeo mmdebstrap runc docker-registry
image-tools:
	@if ! docker info >/dev/null 2>&1; then \
		missing=""; for tool in $(IMAGE_TOOLS); do \
			command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
		if [ -n "$$missing" ]; then \
			if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
				echo "installing Debian's$$missing (image builds without Docker)"; \
				apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
					--no-install-recommends $(IMAGE_TOOLS) uidmap >/dev/null; \
			else \
				echo "image-tools:$$missing missing: install them, or a Docker engine"; \
			fi; \
		fi; \
	fi

# The CRDs in crds/ and charts/pagoda/ come from the typed API in operator/api/;
# tests/operator/test_generated.py fails when they are stale.
generate: setup
	$(BIN)/python -P -m pagoda.operator.api.generate

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis

include e2e/cluster.mk

# The local Kubernetes control plane (e2e/README.md): `include`d by the Makefile.
#
#   make k8s-tools      build etcd, kube-*, kubectl, kwok, helm (cached outside the repo)
#   make cluster-up     start the control plane + fake GPU nodes + pod backer; print KUBECONFIG
#   make cluster-status list its processes
#   make cluster-down   stop everything cluster-up started
#   make test-e2e       only the end-to-end tests (`make test` runs them too)

include e2e/versions.env
E2E_CLI = PYTHON=$(CURDIR)/$(BIN)/python e2e/cli.sh

.PHONY: k8s-tools k8s-versions cluster-up cluster-down cluster-status test-e2e

# A no-op in a second or so when the binaries for versions.env are already cached.
k8s-tools:
	@bash e2e/build-tools.sh

k8s-versions:
	@echo "Kubernetes $(KUBERNETES_VERSION), etcd $(ETCD_VERSION), kwok $(KWOK_VERSION)," \
		"helm $(HELM_VERSION)"

cluster-up: setup k8s-tools
	@$(E2E_CLI) up

cluster-down: setup
	@$(E2E_CLI) down

cluster-status: setup
	@$(E2E_CLI) status

test-e2e: setup k8s-tools
	$(BIN)/pytest -m e2e tests/e2e

"""The engine image an InferenceService runs when it names none.

Kept apart from the builders (which need pydantic) so that building the `pagoda` CLI's
argument parser imports nothing heavy: `pagoda bench` on a GPU host has no operator
dependencies installed. images/engine/Dockerfile builds this name.
"""

DEFAULT_ENGINE_IMAGE = "ghcr.io/pagoda-serving/pagoda-engine:0.1.0"
# The router runs from the operator image (no torch): `python -m pagoda.operator.router`.
DEFAULT_ROUTER_IMAGE = "ghcr.io/pagoda-serving/pagoda-operator:0.1.0"

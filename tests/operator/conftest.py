"""Helpers for the operator's unit tests: InferenceService bodies as the API server
returns them (defaults applied by parsing with the typed API)."""

from __future__ import annotations

from typing import Any

import pytest

from pagoda.operator.builders import BuildOptions, Isvc


def isvc_body(name: str = "llama", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.pagoda.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {"model": {"uri": "pvc://models/llama-3.1-8b"}} | spec,
    }


@pytest.fixture
def make_isvc():
    def make(**spec: Any) -> Isvc:
        return Isvc.from_body(isvc_body(**spec))

    return make


@pytest.fixture
def options() -> BuildOptions:
    return BuildOptions(engine_image="registry.example/pagoda-engine:test")

"""Kernel modules loaded for this machine: compiled on a GPU, interpreted on a CPU."""

from __future__ import annotations

import importlib
import os

import pytest
import torch

ON_GPU = torch.cuda.is_available()


def _kernels(name: str):
    """pagoda.engine.kernels.<name>, under TRITON_INTERPRET=1 while its tests run (no GPU).

    Triton reads the variable when a kernel is decorated and again when it is launched,
    so the module is reloaded with it set, and it stays set until the tests are done.
    """
    if ON_GPU:
        yield importlib.import_module(f"pagoda.engine.kernels.{name}")
        return
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield importlib.reload(importlib.import_module(f"pagoda.engine.kernels.{name}"))
    finally:
        os.environ.pop("TRITON_INTERPRET", None)


@pytest.fixture(scope="module")
def triton_attention():
    yield from _kernels("triton_attention")


@pytest.fixture(scope="module")
def triton_decode():
    yield from _kernels("triton_decode")


@pytest.fixture(scope="module")
def fused():
    yield from _kernels("triton_fused")

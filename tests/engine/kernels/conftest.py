"""Kernel modules for the tests: compiled on a GPU, interpreted on a CPU.

tests/conftest.py sets TRITON_INTERPRET=1 for the whole session when there is no GPU
(Triton reads it when first imported), so the modules are simply imported here.
"""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def triton_attention():
    return importlib.import_module("pagoda.engine.kernels.triton_attention")


@pytest.fixture(scope="module")
def triton_decode():
    return importlib.import_module("pagoda.engine.kernels.triton_decode")


@pytest.fixture(scope="module")
def fused():
    return importlib.import_module("pagoda.engine.kernels.triton_fused")


@pytest.fixture(scope="module")
def skinny():
    return importlib.import_module("pagoda.engine.kernels.triton_skinny")


@pytest.fixture(scope="module")
def fp8_gemv():
    return importlib.import_module("pagoda.engine.kernels.triton_fp8_gemv")


@pytest.fixture(scope="module")
def fp8_blocks():
    return importlib.import_module("pagoda.engine.kernels.triton_fp8_blocks")


@pytest.fixture(scope="module")
def w8a8_few_rows():
    return importlib.import_module("pagoda.engine.kernels.triton_w8a8_few_rows")

"""Programmatic dependent launch (kernels/pdl.py): kernels that start before the one
before them finishes still read only what it wrote.

GPU: a decode step's chain of kernels at Llama-3.1-8B's widths (quantising RMSNorm with
the residual, W8A8 few-rows products, SiLU·mul, the e4m3 GEMV, the split-K product)
captured in a CUDA graph with PDL and replayed on new inputs must give, bit for bit,
what the same chain gives launched eagerly without it. A kernel reading its input before
the kernel that writes it has finished would read the previous replay's values: the
graph's buffers are fixed, so the inputs alternate between replays to catch that.
CPU: PDL stays off where it cannot run, and past a decode step's few rows.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.kernels import pdl

HIDDEN, INTERMEDIATE, LAYERS = 4096, 14336, 4


def test_off_on_the_cpu_past_few_rows_and_under_the_interpreter(monkeypatch):
    assert pdl.launch_options(torch.device("cpu"), 1) == {"PDL": False}
    # a prefill's launches: PDL beside cuBLASLt's FP8 products slowed them
    assert pdl.launch_options(torch.device("cuda", 0), pdl.MAX_ROWS + 1) == {"PDL": False}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not pdl.enabled(torch.device("cuda", 0))


def _weights(generator: torch.Generator) -> list[dict]:
    from pagoda.engine.layers.fp8 import quantize_rows

    def e4m3(fan_out: int, fan_in: int):
        weight = torch.randn(fan_out, fan_in, device="cuda", generator=generator) / fan_in**0.5
        return quantize_rows(weight)  # (values, a scale per output channel)

    def norm():
        return (1 + 0.1 * torch.randn(HIDDEN, device="cuda", generator=generator)).bfloat16()

    return [
        {"gate_up": e4m3(2 * INTERMEDIATE, HIDDEN), "down": e4m3(HIDDEN, INTERMEDIATE),
         "o": e4m3(HIDDEN, HIDDEN), "norm": norm()}
        for _ in range(LAYERS)
    ]  # fmt: skip


def _chain(hidden: torch.Tensor, layers: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """A decode step's MLP halves and an o projection per layer, as the runner chains them
    at few rows: every kernel reads what the one before it wrote."""
    from pagoda.engine.kernels import triton_fp8_gemv, triton_fused, triton_skinny
    from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows

    rows = hidden.shape[0]
    residual = torch.zeros_like(hidden)
    settings = triton_skinny.FP8_SETTINGS
    for layer in layers:
        normed, residual = triton_fused.rms_norm(hidden, layer["norm"], 1e-5, residual, True)
        values, scale = layer["gate_up"]
        gate_up = w8a8_few_rows(
            normed.values, normed.scale, values, scale, None, torch.bfloat16,
            **settings["gate_up_proj"]["w8a8"]["launch"],
        )  # fmt: skip
        values, scale = layer["down"]
        if rows == 1:  # down's one row: the GEMV over the unquantised SiLU·mul
            act = triton_fused.silu_and_mul(gate_up)
            down = triton_fp8_gemv.fp8_gemv(
                act, values, scale, **triton_fp8_gemv.SETTINGS["down_proj"]
            )
        else:
            act = triton_fused.silu_and_mul(gate_up, quantize=True)
            down = w8a8_few_rows(
                act.values, act.scale, values, scale, None, torch.bfloat16,
                **settings["down_proj"]["w8a8"]["launch"],
            )  # fmt: skip
        normed, residual = triton_fused.rms_norm(down, layer["norm"], 1e-5, residual, True)
        values, scale = layer["o"]
        hidden = w8a8_few_rows(  # split over K: programs exchange sums through memory
            normed.values, normed.scale, values, scale, None, torch.bfloat16,
            block_n=64, block_k=256, split_k=4,
        )  # fmt: skip
    return hidden, residual


def _with_pdl(monkeypatch, on: bool) -> None:
    monkeypatch.setenv("PAGODA_PDL", "1" if on else "0")
    pdl._device_options.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 4])
def test_a_captured_chain_with_pdl_matches_eager_launches_without_it(monkeypatch, rows):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    generator = torch.Generator(device="cuda").manual_seed(0)
    layers = _weights(generator)
    inputs = [torch.randn(rows, HIDDEN, device="cuda", generator=generator).bfloat16() * scale
              for scale in (1.0, 30.0)]  # fmt: skip
    try:
        _with_pdl(monkeypatch, False)
        expected = [_chain(x, layers) for x in inputs]
        _with_pdl(monkeypatch, True)
        assert pdl.launch_options(inputs[0].device, rows)["PDL"]
        static_in = inputs[0].clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _chain(static_in, layers)  # compile and allocate eagerly, as the runner does
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = _chain(static_in, layers)
        for replay in range(8):
            which = replay % 2
            static_in.copy_(inputs[which])
            graph.replay()
            torch.cuda.synchronize()
            for got, want in zip(static_out, expected[which], strict=True):
                assert torch.equal(got, want), f"replay {replay} differs from eager launches"
    finally:
        pdl._device_options.cache_clear()  # what PAGODA_PDL says once monkeypatch restores it

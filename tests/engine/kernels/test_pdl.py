"""Programmatic dependent launch (kernels/pdl.py): kernels that start before the one
before them finishes still read only what it wrote.

GPU: a decode step's chain of kernels at Llama-3.1-8B's widths (quantising RMSNorm with
the residual, W8A8 few-rows products, SiLU·mul, the e4m3 GEMV, the split-K product)
captured in a CUDA graph with PDL and replayed on new inputs must give, bit for bit,
what the same chain gives launched eagerly without it. A kernel reading its input before
the kernel that writes it has finished would read the previous replay's values: the
graph's buffers are fixed, so the inputs alternate between replays to catch that.
CPU: PDL stays off where it cannot run, and past a decode step's few rows; every kernel
with a PDL parameter keeps the module's rules, read from its source.
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


# Pointers a PDL kernel may load from before its wait: weights and their scales and
# biases, which no kernel of a step writes (kernels/pdl.py's first rule).
LOADS_BEFORE_THE_WAIT = {
    "_rms_norm_kernel": {"weight_ptr"},
    "_w8a8_few_rows_kernel": {"w_scale_ptr", "bias_ptr", "w_ptr"},
    "_fp8_gemv_kernel": {"scale_ptr", "bias_ptr", "w_ptr"},
    "_fp8_skinny_matmul_kernel": {"scale_ptr", "w_ptr"},
    "_skinny_matmul_kernel": {"w_ptr"},
}


def _pdl_kernels():
    """(module file, function) of every Triton kernel in kernels/ with a PDL parameter."""
    import ast
    from pathlib import Path

    folder = Path(pdl.__file__).parent
    for path in sorted(folder.glob("triton_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                arg.arg == "PDL" for arg in node.args.args
            ):
                yield path.name, node


def _is_call(node, name: str) -> bool:
    import ast

    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    )


def test_every_pdl_kernel_waits_in_every_program_before_reading_activations():
    """The rules of kernels/pdl.py, read from the kernels' source: the wait is a statement
    of the kernel's own body (no branch can skip it), before it no store or atomic, and
    no load or prefetch but of the kernel's weight pointers listed above (the statements
    themselves: a helper called before the wait is not read, so they keep to pdl's)."""
    import ast

    kernels = list(_pdl_kernels())
    assert len(kernels) >= 12, [node.name for _, node in kernels]
    for file, kernel in kernels:
        where = f"{file}:{kernel.name}"
        waits = [
            i for i, statement in enumerate(kernel.body)
            if isinstance(statement, ast.Expr) and _is_call(statement.value, "wait_for_inputs")
        ]  # fmt: skip
        assert len(waits) == 1, f"{where}: one pdl.wait_for_inputs(PDL) in the body itself"
        allowed = LOADS_BEFORE_THE_WAIT.get(kernel.name, set())
        for statement in kernel.body[: waits[0]]:
            for node in ast.walk(statement):
                if _is_call(node, "store") or (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("atomic")
                ):
                    raise AssertionError(f"{where}: writes before its wait")
                if _is_call(node, "load") or _is_call(node, "prefetch_slab"):
                    names = {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name)}
                    pointers = {n for n in names if n.endswith("_ptr")}
                    assert pointers <= allowed, f"{where}: loads {pointers} before its wait"

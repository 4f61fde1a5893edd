"""`quantization="fp8"` (`--quantization fp8`): a 16/32-bit checkpoint's projections
quantised to e4m3 as they load, one scale per output channel, inputs per token.

On the CPU this runs the dequantising reference path (layers/fp8.py), so the whole model
runs there and is the oracle of the GPU's float8 products: each projection holds exactly
its checkpoint weight rounded per row, and nothing else (embeddings, norms, LM head)
changes. On a GPU of compute capability 8.9+ the weights stay float8 (W8A8).
"""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.config import EngineConfig
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.fp8 import Fp8Activations, dequantize_rows, quantize_rows
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear

PROMPTS = ["the cache", "hello world, the paged attention kernel reads every block " * 6]
ON_GPU = torch.cuda.is_available()


def projections(llm: LLM) -> dict[str, torch.nn.Module]:
    model = llm.engine.core.runner.model
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, MergedLinear | RowParallelLinear)
    }


def last_logits(llm: LLM) -> torch.Tensor:
    model = llm.engine.core.runner.model
    captured = []
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden)) or captured[-1]
    llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=1))
    return captured[0].cpu()


def test_projections_hold_their_weights_rounded_per_channel(llama_dir):
    plain = LLM(str(llama_dir), device="cpu")
    fp8 = LLM(str(llama_dir), device="cpu", quantization="fp8")
    quantised = projections(fp8)
    assert quantised and all(m.weight_fp8 == "rounded" for m in quantised.values())
    assert all(isinstance(m.input_fp8, Fp8Activations) for m in quantised.values())
    assert {m.input_fp8.strategy for m in quantised.values()} == {"token"}
    for name, module in projections(plain).items():
        expected = dequantize_rows(*quantize_rows(module.weight), module.weight.dtype)
        assert torch.equal(quantised[name].weight, expected), name
        assert not torch.equal(quantised[name].weight, module.weight), name
    others = dict(fp8.engine.core.runner.model.named_parameters())
    for name, param in plain.engine.core.runner.model.named_parameters():
        if name.rpartition(".")[0] not in quantised:  # embeddings, norms, the LM head
            assert torch.equal(others[name], param), name


def test_the_quantised_model_answers_close_to_the_unquantised_one(llama_dir):
    plain = last_logits(LLM(str(llama_dir), device="cpu"))
    fp8 = last_logits(LLM(str(llama_dir), device="cpu", quantization="fp8"))
    gap = float((fp8 - plain).norm() / plain.norm())
    # e4m3's rounding shows, and stays a rounding: each product is ≈ 4% off (both operands
    # rounded), and the tiny random model's 0.12 is that compounded over its layers
    assert 1e-3 < gap < 0.25


def test_random_weights_are_the_same_draws_rounded(llama_dir):
    """Benchmarks compare FP8 with bf16 on the same random weights: one seed, one set."""
    settings = dict(load_format="dummy", device="cpu", num_kv_blocks=16, max_model_len=128)
    torch.manual_seed(5)
    plain = LLM(str(llama_dir), **settings)
    torch.manual_seed(5)
    fp8 = LLM(str(llama_dir), quantization="fp8", **settings)
    quantised = projections(fp8)
    for name, module in projections(plain).items():
        expected = dequantize_rows(*quantize_rows(module.weight), module.weight.dtype)
        assert torch.equal(quantised[name].weight, expected), name


def test_on_the_cpu_the_plan_keeps_the_reference_products(llama_dir):
    config = EngineConfig(model=str(llama_dir), device="cpu", quantization="fp8").resolve()
    assert config.fp8_scheme is not None and config.fp8_scheme.runs_w8a8
    plan = KernelPlan.choose(config, torch.device("cpu"), 4, 2, 16, 64)
    assert not plan.fp8_products


def test_a_gpu_without_float8_products_is_refused(llama_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    config = EngineConfig(model=str(llama_dir), device="cuda", quantization="fp8")
    with pytest.raises(ValueError, match=r"compute capability 8\.9 or newer.*A100 has 8\.0"):
        config.resolve()


def test_another_quantisation_in_the_checkpoint_is_refused(llama_dir, tmp_path):
    import json
    import shutil

    model_dir = shutil.copytree(llama_dir, tmp_path / "awq")
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="quant_method 'awq' is not supported"):
        LLM(str(model_dir), device="cpu", quantization="fp8")


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_on_a_gpu_the_weights_stay_float8_and_answer_as_the_reference(llama_dir):
    """Each kept e4m3 weight times its row scales is the CPU reference's rounded weight:
    within a float32 rounding (torch's CUDA division by a scalar multiplies by the
    reciprocal, so a row scale may sit one ulp from the CPU's), but where a value sits
    on an e4m3 rounding boundary, which may then fall on either side (one e4m3 step, in
    under 0.1% of the values). The products are checked at Llama-8B shapes in
    tests/engine/layers. End to end (CUDA graphs, W8A8 prefill, the few-rows e4m3
    product at decode) the logits stay within the CPU's own FP8-against-plain bound
    (0.25): the tiny random model turns a few flipped roundings into 0.10 (measured)."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 products need compute capability 8.9+")
    reference_llm = LLM(str(llama_dir), device="cpu", quantization="fp8")
    reference = last_logits(reference_llm)
    llm = LLM(str(llama_dir), device="cuda", dtype="bfloat16", quantization="fp8")
    assert llm.engine.core.runner.plan.fp8_products
    expected = projections(reference_llm)
    for name, module in projections(llm).items():
        assert module.weight.dtype == torch.float8_e4m3fn, name
        kept = dequantize_rows(module.weight, module.weight_scale, torch.float32).cpu()
        want = expected[name].weight.detach()
        apart = ~torch.isclose(kept, want, rtol=1e-6, atol=0)
        assert apart.double().mean() < 1e-3, name
        step = want.abs() / 7 + module.weight_scale.cpu()[:, None] * 2.0**-9  # subnormals too
        assert ((kept - want).abs() <= step)[apart].all(), name
    logits = last_logits(llm).float()
    gap = float((logits - reference).norm() / reference.norm())
    assert gap < 0.25, f"GPU W8A8 {gap:.4f} from the CPU reference"
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    assert all(len(o.outputs[0].token_ids) == 16 for o in llm.generate(PROMPTS, greedy))

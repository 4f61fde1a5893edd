"""FP8 checkpoints on the CPU reference path against transformers loading the same files.

compressed-tensors itself quantises the tiny llama (per channel, per tensor and per block,
activations dynamic per token or per group) and writes the checkpoint as llm-compressor
does; transformers loads it dequantised, and its forward rounds the activations as the
scheme says. A block-wise checkpoint in transformers' fine-grained FP8 format is written
here by the format's rule; transformers dequantises its weights (its `dequantize=True`
leaves activations alone, so the test rounds the inputs of its Linear layers per group).

Tolerance: 1e-4 (atol and rtol), as the fp32 parity test: both sides compute the same
float32 products on the same rounded values, so only summation order differs. A product
that rounds an activation across an e4m3 step differently would miss it by far more
(e4m3 steps are 1/16 of the value).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pagoda.engine import LLM, SamplingParams

PROMPTS = ["the cache", "hello world, the paged attention kernel reads every block " * 6]
BLOCK = 16  # the tiny model's widths (64, 176) split into 16-wide blocks and groups


def compressed(base: Path, out: Path, weights: dict, activations: dict | None) -> Path:
    """The tiny model quantised by compressed-tensors: weight scales from each tensor's
    range (what llm-compressor's min-max observer computes), then compressed and saved."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    scheme = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=8, type="float", symmetric=True, **weights),
        input_activations=None
        if activations is None
        else QuantizationArgs(num_bits=8, type="float", symmetric=True, dynamic=True,
                              **activations),
    )  # fmt: skip
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"])
    apply_quantization_config(model, config)
    for module in model.modules():
        args = getattr(getattr(module, "quantization_scheme", None), "weights", None)
        if args is None:
            continue
        low, high = _ranges(module.weight.data, args.strategy)
        scale, _ = calculate_qparams(low, high, args)
        module.weight_scale.data = scale.reshape(module.weight_scale.shape)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="float-quantized")
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    _copy_tokenizer(base, out)
    return out


def _ranges(weight: torch.Tensor, strategy: str) -> tuple[torch.Tensor, torch.Tensor]:
    if strategy == "tensor":
        return weight.amin().reshape(1), weight.amax().reshape(1)
    if strategy == "channel":
        return weight.amin(1, keepdim=True), weight.amax(1, keepdim=True)
    blocks = weight.unflatten(0, (-1, BLOCK)).unflatten(2, (-1, BLOCK))
    return blocks.amin((1, 3)), blocks.amax((1, 3))


def fine_grained(base: Path, out: Path, block: int = BLOCK) -> Path:
    """transformers' block-wise FP8 format: each block × block square of a projection's
    weight (short at the edges) in e4m3 over its largest magnitude, `weight_scale_inv` the
    block's multiplier."""
    out.mkdir()
    tensors = {}
    for name, tensor in load_file(base / "model.safetensors").items():
        if not name.endswith("proj.weight"):
            tensors[name] = tensor
            continue
        rows, cols = tensor.shape
        padded = torch.nn.functional.pad(tensor, (0, -cols % block, 0, -rows % block))
        blocks = padded.unflatten(0, (-1, block)).unflatten(2, (-1, block))
        scale = blocks.abs().amax((1, 3)) / 448.0
        expanded = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)
        tensors[name] = (tensor / expanded[:rows, :cols]).to(torch.float8_e4m3fn)
        tensors[name.removesuffix(".weight") + ".weight_scale_inv"] = scale
    save_file(tensors, out / "model.safetensors")
    config = json.loads((base / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [block, block],
    }  # fmt: skip
    (out / "config.json").write_text(json.dumps(config))
    _copy_tokenizer(base, out)
    return out


def _copy_tokenizer(base: Path, out: Path) -> None:
    for path in base.iterdir():
        if path.name.startswith("tokenizer") or path.name == "generation_config.json":
            shutil.copy(path, out / path.name)


def our_logits(model_dir: Path, **settings) -> torch.Tensor:
    llm = LLM(str(model_dir), **{"device": "cpu", **settings})  # the reference path
    captured = []
    model = llm.engine.core.runner.model
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden)) or captured[-1]
    llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=1))
    return captured[0].cpu()


def their_logits(model_dir: Path, hf_kwargs: dict, round_inputs=None) -> torch.Tensor:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **hf_kwargs)
    if round_inputs is not None:
        for name, module in hf.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "lm_head":
                assert module.weight.dtype == torch.float32  # dequantised by transformers
                module.register_forward_pre_hook(lambda _, inputs: (round_inputs(*inputs),))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            rows.append(hf.eval()(ids).logits[0, -1].float())
    return torch.stack(rows)


@pytest.mark.parametrize(
    ("weights", "activations"),
    [
        ({"strategy": "channel"}, {"strategy": "token"}),  # llm-compressor's FP8_DYNAMIC
        ({"strategy": "tensor"}, {"strategy": "token"}),
        ({"strategy": "block", "block_structure": [BLOCK, BLOCK]},
         {"strategy": "group", "group_size": BLOCK}),  # FP8_BLOCK's shape
        ({"strategy": "channel"}, None),  # weights only
    ],
    ids=["channel-token", "tensor-token", "block-group", "channel-weights-only"],
)  # fmt: skip
def test_compressed_tensors_fp8_matches_transformers(llama_dir, tmp_path, weights, activations):
    from transformers.utils.quantization_config import CompressedTensorsConfig

    model_dir = compressed(llama_dir, tmp_path / "fp8", weights, activations)
    config = CompressedTensorsConfig(dequantize=True)
    expected = their_logits(model_dir, {"quantization_config": config})
    torch.testing.assert_close(our_logits(model_dir), expected, atol=1e-4, rtol=1e-4)
    # and the scheme matters: the unquantised model answers measurably apart
    assert (our_logits(llama_dir) - expected).abs().max() > 1e-3


def test_the_fp8_flag_on_an_fp8_checkpoint_uses_its_own_scales(llama_dir, tmp_path):
    model_dir = compressed(
        llama_dir, tmp_path / "fp8", {"strategy": "tensor"}, {"strategy": "token"}
    )
    torch.testing.assert_close(
        our_logits(model_dir, quantization="fp8"), our_logits(model_dir), atol=0, rtol=0
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("weights", ["channel", "tensor", "fine-grained blocks", "blocks"])
def test_on_a_gpu_fp8_checkpoints_multiply_in_float8(llama_dir, tmp_path, weights):
    """Per-channel and per-tensor weights with per-token activations, and 32 × 32 block
    weights with per-group activations (transformers' fine-grained format), stay float8
    (W8A8) and answer as the CPU's float32 reference of the same checkpoint as closely as
    the reference itself does in bf16 (within twice its spread). Block-wise, the tiny
    model's attention projections split into whole blocks and its MLP's 176 columns do
    not, so the MLP stays on the reference path beside them; 16 × 16 blocks (compressed-
    tensors' FP8_BLOCK shape here) are too narrow for a float8 tensor-core product and
    stay there whole. The tiny model's activations round to e4m3, so a bf16 input crosses
    e4m3 steps a float32 one does not: the CPU's own bf16 logits are 12% from its float32
    ones (the H200 path measured 11% and 12% per token); a wrong scale or layout misses by
    far more."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 products need compute capability 8.9+")
    if weights == "fine-grained blocks":
        model_dir = fine_grained(llama_dir, tmp_path / "fp8", block=32)
    else:
        pytest.importorskip("compressed_tensors")
        strategy, activations = {"strategy": weights}, {"strategy": "token"}
        if weights == "blocks":
            strategy = {"strategy": "block", "block_structure": [BLOCK, BLOCK]}
            activations = {"strategy": "group", "group_size": BLOCK}
        model_dir = compressed(llama_dir, tmp_path / "fp8", strategy, activations)
    reference = our_logits(model_dir, device="cpu")
    llm = LLM(str(model_dir), device="cuda", dtype="bfloat16")
    layer = llm.engine.core.runner.model.model.layers[0]
    o_proj, down = layer.self_attn.o_proj, layer.mlp.down_proj
    if weights == "blocks":  # 16 columns: the reference path
        assert not llm.engine.core.runner.plan.fp8_products
        assert o_proj.weight_fp8 == down.weight_fp8 == "rounded"
    elif weights == "fine-grained blocks":
        assert o_proj.weight.dtype == torch.float8_e4m3fn and o_proj.weight_scale.shape == (2, 2)
        assert down.weight_fp8 == "rounded"
    else:
        assert down.weight.dtype == torch.float8_e4m3fn and down.weight_scale.dim() == 1
    model = llm.engine.core.runner.model
    captured = []
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden)) or captured[-1]
    llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=1))
    logits = captured[0].float().cpu()
    spread = _relative(our_logits(model_dir, device="cpu", dtype="bfloat16"), reference)
    assert _relative(logits, reference) < 2 * spread


def test_fine_grained_block_fp8_matches_transformers(llama_dir, tmp_path):
    from transformers import FineGrainedFP8Config

    model_dir = fine_grained(llama_dir, tmp_path / "fp8")
    config = FineGrainedFP8Config(dequantize=True, weight_block_size=(BLOCK, BLOCK))
    expected = their_logits(model_dir, {"quantization_config": config}, _rounded_per_group)
    torch.testing.assert_close(our_logits(model_dir), expected, atol=1e-4, rtol=1e-4)


def _rounded_per_group(x: torch.Tensor) -> torch.Tensor:
    """The format's dynamic activations: each 16 columns to e4m3 over their largest
    magnitude (what its kernels do before each product)."""
    groups = x.unflatten(-1, (-1, BLOCK))
    scale = groups.abs().amax(-1, keepdim=True) / 448.0
    scale = torch.where(scale == 0, torch.finfo(scale.dtype).eps, scale)
    rounded = (groups / scale).clamp(-448, 448).to(torch.float8_e4m3fn).to(x.dtype) * scale
    return rounded.flatten(-2)


# llm-compressor's FP8 KV-cache scheme, as compressed-tensors writes it (QuantizationArgs)
KV_SCHEME = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None,
             "strategy": "tensor", "dynamic": False, "observer": "minmax"}  # fmt: skip


def ct_config(**changes) -> dict:
    weights = {
        "num_bits": 8,
        "type": "float",
        "strategy": "channel",
        "symmetric": True,
        "dynamic": False,
    }
    group = {
        "targets": ["Linear"],
        "weights": weights,
        "format": "float-quantized",
        "input_activations": {
            "num_bits": 8,
            "type": "float",
            "strategy": "token",
            "dynamic": True,
            "symmetric": True,
        },
    }
    config = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
        "quantization_status": "compressed",
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = config
        for key in parents:
            target = target[key]
        target[last] = value
    return config  # fmt: skip


@pytest.mark.parametrize(
    ("quantization", "message"),
    [
        ({"quant_method": "awq", "bits": 4},
         "quantization_config.quant_method 'awq' is not supported"),
        (ct_config(config_groups__group_0__weights__num_bits=4),
         "config_groups.group_0.weights {'type': 'float', 'num_bits': 4} is not supported"),
        (ct_config(config_groups__group_0__weights__type="int"), "only 8-bit float"),
        (ct_config(config_groups__group_0__input_activations__dynamic=False),
         "input_activations.dynamic False is not supported: static activation scales"),
        (ct_config(config_groups__group_0__weights__strategy="group"),
         "weights.strategy 'group' is not supported"),
        (ct_config(config_groups__group_0__format="pack-quantized"),
         "format 'pack-quantized' is not supported"),
        (ct_config(kv_cache_scheme={"num_bits": 8}),
         "kv_cache_scheme {'type': None, 'num_bits': 8} is not supported: only 8-bit float"),
        (ct_config(kv_cache_scheme=KV_SCHEME | {"dynamic": True}),
         "kv_cache_scheme.dynamic True is not supported: only static scales"),
        (ct_config(kv_cache_scheme=KV_SCHEME | {"strategy": "channel"}),
         "kv_cache_scheme.strategy 'channel' is not supported: only one K and one V scale"),
        (ct_config(kv_cache_scheme=KV_SCHEME | {"group_size": 16}),
         "kv_cache_scheme.group_size 16 is not supported: leave it null"),
        (ct_config(kv_cache_scheme=KV_SCHEME | {"symmetric": False}),
         "kv_cache_scheme.symmetric False is not supported"),
        (ct_config(kv_cache_scheme=KV_SCHEME | {"rotation": "hadamard"}),
         "kv_cache_scheme.rotation 'hadamard' is not supported"),
        (ct_config(ignore=[]), "must list lm_head"),
        (ct_config(config_groups__group_0__targets=["re:.*proj"]), "only [\"Linear\"]"),
        ({"quant_method": "fp8", "weight_block_size": [128]},
         "weight_block_size [128] must be two positive integers"),
        ({"quant_method": "fp8", "activation_scheme": "static"},
         "activation_scheme 'static' is not supported"),
    ],
)  # fmt: skip
def test_fp8_configs_the_engine_cannot_run_are_refused_by_field(
    llama_dir, tmp_path, quantization, message
):
    from pagoda.engine.model_config import load_model_config

    model_dir = tmp_path / "model"
    shutil.copytree(llama_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(
        json.dumps({**config, "quantization_config": quantization})
    )
    with pytest.raises(ValueError, match=r"config\.json: quantization_config") as refused:
        load_model_config(model_dir)
    assert message in str(refused.value)


def test_a_float8_weight_without_its_scale_is_refused(llama_dir, tmp_path):
    model_dir = fine_grained(llama_dir, tmp_path / "fp8")
    tensors = load_file(model_dir / "model.safetensors")
    del tensors["model.layers.0.mlp.down_proj.weight_scale_inv"]
    save_file(tensors, model_dir / "model.safetensors")
    with pytest.raises(ValueError, match=r"down_proj\.weight has no .*weight_scale_inv beside it"):
        LLM(str(model_dir))


def with_kv_scales(model_dir: Path, out: Path, k_scale: float, v_scale: float) -> Path:
    """The checkpoint with compressed-tensors' static FP8 KV-cache scheme: its
    `kv_cache_scheme` (QuantizationArgs, as the library serialises it) and one k_scale and
    v_scale per layer, named and shaped as the library's attention parameters are
    (`model.layers.N.self_attn.k_scale`, [1]). (The library's compressor cannot save an
    attention scheme of a model without a KV-cache hook, so the two are added here.)"""
    from compressed_tensors.quantization import QuantizationArgs

    shutil.copytree(model_dir, out)
    tensors = load_file(out / "model.safetensors")
    layers = {name.split(".")[2] for name in tensors if name.startswith("model.layers.")}
    for layer in layers:
        tensors[f"model.layers.{layer}.self_attn.k_scale"] = torch.tensor([k_scale])
        tensors[f"model.layers.{layer}.self_attn.v_scale"] = torch.tensor([v_scale])
    save_file(tensors, out / "model.safetensors")
    scheme = QuantizationArgs(num_bits=8, type="float", strategy="tensor", dynamic=False,
                              symmetric=True)  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"]["kv_cache_scheme"] = scheme.model_dump()
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def fp8_weights(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny llama as llm-compressor's FP8_DYNAMIC writes it (per-channel weights)."""
    pytest.importorskip("compressed_tensors")
    out = tmp_path_factory.mktemp("fp8") / "fp8"
    return compressed(tiny_model_dir("llama"), out, {"strategy": "channel"}, {"strategy": "token"})


def test_kv_cache_scales_match_transformers(fp8_weights, tmp_path):
    """transformers (with compressed-tensors) rounds K and V to e4m3 over the checkpoint's
    scales in its cache, dequantising them for attention; the engine's float8 cache holds
    K / k_scale and folds the scales into the scores and the output. Same rounded values,
    fp32 products: the fp32 parity tolerance. The scales are far from 1 and unequal, so
    one dropped or applied twice moves the logits by orders of magnitude more."""
    model_dir = with_kv_scales(fp8_weights, tmp_path / "kv", k_scale=0.01, v_scale=0.05)
    expected = their_logits(model_dir, {})
    got = our_logits(model_dir, kv_cache_dtype="fp8")
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    unscaled = with_kv_scales(fp8_weights, tmp_path / "kv1", k_scale=1.0, v_scale=1.0)
    assert (their_logits(unscaled, {}) - expected).abs().max() > 1e-2  # the scales matter


def test_kv_cache_scales_are_unused_by_a_16_bit_cache(fp8_weights, tmp_path):
    model_dir = with_kv_scales(fp8_weights, tmp_path / "kv", k_scale=0.01, v_scale=0.05)
    torch.testing.assert_close(our_logits(model_dir), our_logits(fp8_weights), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("model.layers.1.self_attn.v_scale"),
         r"lacks 1 tensors, e\.g\. model\.layers\.1\.self_attn\.v_scale"),
        (lambda t: t.update({"model.layers.0.self_attn.k_scale": torch.tensor([0.0])}),
         r"model\.layers\.0\.self_attn\.k_scale is 0\.0: a K/V scale must be a positive"),
        (lambda t: t.update({"model.layers.0.self_attn.k_scale": torch.tensor([float("nan")])}),
         r"k_scale is nan: a K/V scale must be a positive finite number"),
        (lambda t: t.update({"model.layers.0.self_attn.v_scale": torch.ones(8)}),
         r"v_scale has shape \[8\]: a K/V scale is one number per layer"),
    ],
    ids=["missing", "zero", "nan", "per-head"],
)  # fmt: skip
def test_bad_kv_cache_scales_are_refused_by_name(fp8_weights, tmp_path, change, message):
    model_dir = with_kv_scales(fp8_weights, tmp_path / "kv", k_scale=0.01, v_scale=0.05)
    tensors = load_file(model_dir / "model.safetensors")
    change(tensors)
    save_file(tensors, model_dir / "model.safetensors")
    with pytest.raises(ValueError, match=message):
        LLM(str(model_dir), device="cpu", kv_cache_dtype="fp8")


def test_a_scalar_kv_cache_scale_loads(fp8_weights, tmp_path):
    """Shape [] (as some exporters write it) is the same single number as [1]."""
    model_dir = with_kv_scales(fp8_weights, tmp_path / "kv", k_scale=0.01, v_scale=0.05)
    tensors = load_file(model_dir / "model.safetensors")
    reference_logits = our_logits(model_dir, kv_cache_dtype="fp8")
    for name in [n for n in tensors if n.endswith(("k_scale", "v_scale"))]:
        tensors[name] = tensors[name].reshape(())
    save_file(tensors, model_dir / "model.safetensors")
    torch.testing.assert_close(
        our_logits(model_dir, kv_cache_dtype="fp8"), reference_logits, atol=0, rtol=0
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_kv_cache_scales_answer_as_the_cpu_reference(fp8_weights, tmp_path):
    """The GPU path (fused store, Triton kernels over the float8 cache, bf16) on a checkpoint
    with K/V scales answers as the CPU's float32 reference of it as closely as the
    reference itself does in bf16 (within twice its spread, 9% on the CPU), while scales
    left at 1 move the reference by 53%: a dropped or doubled scale cannot pass."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 products need compute capability 8.9+")
    model_dir = with_kv_scales(fp8_weights, tmp_path / "kv", k_scale=0.002, v_scale=0.2)
    reference_logits = our_logits(model_dir, kv_cache_dtype="fp8")
    bound = 2 * _relative(
        our_logits(model_dir, kv_cache_dtype="fp8", dtype="bfloat16"), reference_logits
    )
    unscaled = with_kv_scales(fp8_weights, tmp_path / "kv1", k_scale=1.0, v_scale=1.0)
    assert _relative(our_logits(unscaled, kv_cache_dtype="fp8"), reference_logits) > 2 * bound
    logits = our_logits(model_dir, device="cuda", dtype="bfloat16", kv_cache_dtype="fp8")
    assert _relative(logits, reference_logits) < bound


def _relative(logits: torch.Tensor, reference: torch.Tensor) -> float:
    reference = reference.float()
    return float((logits.float() - reference).norm() / reference.norm())

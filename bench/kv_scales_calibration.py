"""Would K/V scales calibrated on text bring an fp8 KV cache closer to bf16 than storing
K/V unscaled? (A checkpoint's own `k_scale`/`v_scale` load today; the engine calibrates
none.) On a trained checkpoint on the CPU:

    python bench/kv_scales_calibration.py MODEL_DIR CALIBRATION_TEXT EVALUATION_TEXT

1. bf16 engine over windows of CALIBRATION_TEXT: each layer's largest |K| (after the
   rotation) and |V| as they are stored;
2. over windows of EVALUATION_TEXT: bf16 with a bf16 cache (the reference), then an fp8
   cache unscaled, then over per-layer scales amax/448 (the largest value maps to e4m3's
   largest) and amax/224 (twice the headroom);
3. per mode against the reference, as bench/fp8_accuracy.py reports them: mean and max KL
   of the next-token distribution, argmax agreement, the logits' relative error.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import fp8_accuracy  # beside this script
import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.kernels import reference

WINDOWS, LENGTH = 32, 256
ONE = SamplingParams(temperature=0.0, max_tokens=1)


def engine(model_dir: Path, **settings) -> LLM:
    return LLM(str(model_dir), dtype="bfloat16", device="cpu", max_model_len=1024, **settings)


def calibrate(model_dir: Path, text: Path) -> list[tuple[float, float]]:
    """Each layer's (max |K|, max |V|) over the text's windows, as the cache receives them."""
    seen: dict[int, tuple[float, float]] = {}
    store = reference.store_kv

    def recording(key, value, kv_cache, slots, kv_scales=(1.0, 1.0)):
        k, v = seen.get(id(kv_cache), (0.0, 0.0))
        seen[id(kv_cache)] = (max(k, key.abs().max().item()), max(v, value.abs().max().item()))
        return store(key, value, kv_cache, slots, kv_scales)

    reference.store_kv = recording
    try:
        llm = engine(model_dir)
        for prompt in fp8_accuracy.text_prompts(model_dir, text, WINDOWS, LENGTH):
            llm.generate([prompt], ONE)
        layers = [seen[id(cache)] for cache in llm.engine.core.runner.kv_caches]
    finally:
        reference.store_kv = store
    llm.shutdown()
    gc.collect()
    return layers


def next_token_logits(model_dir: Path, prompts, scales=None, **settings) -> torch.Tensor:
    llm = engine(model_dir, **settings)
    model = llm.engine.core.runner.model
    if scales is not None:  # what a checkpoint's k_scale/v_scale would set
        layers = [m for m in model.modules() if hasattr(m, "take_kv_scales")]
        for layer, pair in zip(layers, scales, strict=True):
            layer.attn.kv_scales = pair
    captured = []
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden).float()) or captured[-1]
    for prompt in prompts:
        llm.generate([prompt], ONE)
    llm.shutdown()
    gc.collect()
    return torch.cat(captured)


def main() -> None:
    model_dir, calibration, evaluation = (Path(arg) for arg in sys.argv[1:4])
    amax = calibrate(model_dir, calibration)
    print("max |K| per layer:", [round(k, 2) for k, _ in amax])
    print("max |V| per layer:", [round(v, 3) for _, v in amax])
    prompts = fp8_accuracy.text_prompts(model_dir, evaluation, 2 * WINDOWS, LENGTH)
    bf16 = next_token_logits(model_dir, prompts)
    modes = {"fp8 KV, unscaled": None}
    for name, headroom in (("fp8 KV, amax/448", 1.0), ("fp8 KV, amax/224", 2.0)):
        modes[name] = [(k * headroom / 448, v * headroom / 448) for k, v in amax]
    print("\n| KV cache | mean KL nats | max KL nats | argmax agreement | logits rel. error |")
    print("| --- | --- | --- | --- | --- |")
    for name, scales in modes.items():
        got = next_token_logits(model_dir, prompts, scales, kv_cache_dtype="fp8")
        r = fp8_accuracy.compare(bf16, got)
        print(
            f"| {name} | {r['mean_kl_nats']:.4f} | {r['max_kl_nats']:.3f} "
            f"| {r['top1_agreement']:.3f} | {r['logits_relative_error']:.4f} |"
        )


if __name__ == "__main__":
    main()

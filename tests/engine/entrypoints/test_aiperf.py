"""aiperf, NVIDIA's load generator (GenAI-Perf's successor), against the server on its
standard path: synthetic prompts of an exact token count at a fixed concurrency,
streamed, over text and chat completions, on the demo model (a real tokenizer, whose
decoded prompts encode back to the same tokens). Every request must succeed, the server's
usage must count the prompt tokens aiperf's own tokenizer counted (text completions) and
the output tokens asked for, and tokens must arrive as they are sampled. aiperf runs
from its own venv (client_envs.py, `make client-envs`); the test skips, saying so, where
it is missing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.engine.entrypoints.client_envs import AIPERF
from tests.engine.entrypoints.live_server import API_KEY

pytestmark = pytest.mark.skipif(
    AIPERF.executable() is None, reason="aiperf is not installed: make client-envs"
)
REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS = 12, 24, 12


def run_aiperf(url: str, model_dir: Path, endpoint: str, out: Path) -> list[dict]:
    exact = {"--synthetic-input-tokens-mean": PROMPT_TOKENS, "--output-tokens-mean": OUTPUT_TOKENS,
             "--synthetic-input-tokens-stddev": 0, "--output-tokens-stddev": 0}  # fmt: skip
    command = [str(AIPERF.executable()), "profile", "--model", "tiny", "--url", url,
               "--api-key", API_KEY, "--endpoint-type", endpoint, "--streaming",
               "--request-count", str(REQUESTS), "--concurrency", "4",
               "--tokenizer", str(model_dir), "--extra-inputs", "ignore_eos:true",
               "--artifact-dir", str(out), "--ui-type", "none",
               # one worker and no GPU or server-metrics pollers: a small machine's cores
               # stay with the server
               "--workers-max", "1", "--record-processors", "1",
               "--no-gpu-telemetry", "--no-server-metrics"]  # fmt: skip
    command += [str(arg) for pair in exact.items() for arg in pair]
    # (not HF_HUB_OFFLINE: aiperf's tokenizer check then takes the folder for a repo id)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(out)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=400, cwd=out)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    lines = (out / "profile_export.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module", params=["completions", "chat"])
def records(request, demo_server, demo_model, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("aiperf")
    return run_aiperf(demo_server.url, demo_model[0], request.param, out)


def value(record: dict, metric: str):
    return record["metrics"][metric]["value"]


def test_every_request_succeeds_with_the_tokens_aiperf_counted(records, request):
    assert len(records) == REQUESTS
    for record in records:
        assert "error" not in record or record["error"] is None, record.get("error")
        assert value(record, "input_sequence_length") == PROMPT_TOKENS
        # (aiperf also re-tokenizes the decoded output, which need not give back as many)
        assert value(record, "usage_completion_tokens") == OUTPUT_TOKENS
        if request.node.callspec.id == "completions":
            assert value(record, "usage_prompt_tokens") == PROMPT_TOKENS
        else:  # the chat template's tokens come on top
            assert value(record, "usage_prompt_tokens") > PROMPT_TOKENS


def test_tokens_stream_as_they_are_sampled(records):
    for record in records:
        # aiperf counts network reads, into which two events sent close together can fall
        assert value(record, "http_req_chunks_received") > OUTPUT_TOKENS // 2
        assert 0 < value(record, "time_to_first_token") < value(record, "request_latency")

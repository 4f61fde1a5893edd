"""`pagoda serve --tensor-parallel-size 2`: the same tokens as one process, and a dead
worker turns /health 503 and makes the server exit non-zero naming the rank."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from pagoda.engine import LLM, SamplingParams
from tests.conftest import parity_prompts


def children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").glob("*/children")
        for child in task.read_text().split()
    ]


def test_two_ranks_serve_the_tokens_of_one_process(start_server, llama_dir):
    prompts = parity_prompts()[:12]
    expected = LLM(str(llama_dir), max_model_len=512).generate(
        prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    )
    server = start_server("--tensor-parallel-size", "2", "--max-model-len", "512")
    for prompt, reference in zip(prompts, expected, strict=True):
        response = httpx.post(
            f"{server.url}/v1/completions",
            timeout=60,
            json={
                "model": "tiny",
                "prompt": prompt,
                "max_tokens": 12,
                "temperature": 0,
                "ignore_eos": True,
            },
        )
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"] == reference.outputs[0].text
    assert server.terminate() == 0


def test_a_killed_worker_turns_health_503_and_the_server_exits_naming_the_rank(start_server):
    server = start_server("--tensor-parallel-size", "2", "--dead-exit-delay", "3")
    (worker,) = children(server.core_pid())  # rank 1, spawned by the engine core process
    os.kill(worker, signal.SIGKILL)
    started = time.monotonic()
    while httpx.get(f"{server.url}/health", timeout=5).status_code != 503:
        assert time.monotonic() - started < 10, "health stayed 200 after a worker died"
        time.sleep(0.1)
    assert server.process.wait(60) == 1
    assert "rank 1" in server.log()

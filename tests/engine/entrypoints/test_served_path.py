"""The served path's pieces: the benchmark checkpoint (a tokenizer covering the whole
vocabulary, random weights on disk), `pagoda serve` on it and `pagoda bench serve
--workload random-ids` drawing the requests `pagoda bench throughput` runs offline.

On a CPU the checkpoint is the tiny shape with Llama-3.1-8B's vocabulary; the H200 runs the
same commands at full size (bench/served_path.sh)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from pagoda.engine.benchmarks import tokenizer as bench_tokenizer
from pagoda.engine.benchmarks.model import SHAPES, random_requests
from pagoda.engine.benchmarks.report import RequestResult
from pagoda.engine.benchmarks.serve import _on_event
from tests.engine.entrypoints.live_server import ENV

VOCAB = SHAPES["llama-3.1-8b"]["vocab_size"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-checkpoint")
    command = [sys.executable, "-m", "pagoda.cli", "bench", "write-model", str(out),
               "--shape", "tiny-llama-3"]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_tokenizer_decodes_every_sampled_token_to_text(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert len(tokenizer) == VOCAB
    config = json.loads((checkpoint / "config.json").read_text())
    assert tokenizer.bos_token_id == config["bos_token_id"]
    assert tokenizer.eos_token_id == config["eos_token_id"]
    texts = tokenizer.batch_decode([[i] for i in range(VOCAB)], skip_special_tokens=True)
    assert [i for i, text in enumerate(texts) if not text] == [0, 1, 2]  # the specials
    # every token past the byte symbols spells letters, one to four of them
    assert all(t.strip().isalpha() and len(t.strip()) <= 4 for t in texts[3 + 256 :])
    text = "Serve the model, then measure it: 42 tokens!"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_a_vocabulary_it_cannot_build_is_refused():
    with pytest.raises(ValueError, match="choose a model shape"):
        bench_tokenizer.build(100)
    with pytest.raises(ValueError, match="choose a model shape"):
        bench_tokenizer.build(10**6)


def test_random_requests_draw_lengths_within_the_range():
    requests = random_requests(200, 1088, 544, 15 / 17, VOCAB, seed=0)
    assert requests == random_requests(200, 1088, 544, 15 / 17, VOCAB, seed=0)
    prompt_lens = [len(prompt) for prompt, _ in requests]
    output_lens = [length for _, length in requests]
    assert min(prompt_lens) >= 128 and max(prompt_lens) <= 2048
    assert min(output_lens) >= 64 and max(output_lens) <= 1024
    assert all(3 <= i < VOCAB for prompt, _ in requests for i in prompt)
    with pytest.raises(ValueError, match="range ratio"):
        random_requests(10, 100, 10, 1.0, VOCAB, seed=0)


def test_every_chunk_with_a_choice_is_timed_even_without_text():
    result = RequestResult()
    for line in (
        'data: {"choices": [{"index": 0, "text": "ab"}]}',
        'data: {"choices": [{"index": 0, "text": ""}]}',  # a token still undecodable
        'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}',
        "data: [DONE]",
    ):
        _on_event(result, line, started=0.0)
    assert len(result.chunk_times) == 2 and result.output_tokens == 2


def test_bench_serve_streams_every_token_of_the_offline_requests(
    checkpoint, start_server, tmp_path
):
    server = start_server("--max-model-len", "1024", model_dir=checkpoint)
    result_file = tmp_path / "served.json"
    flags = ["--num-prompts", "12", "--random-input-len", "40", "--random-output-len", "16",
             "--random-range-ratio", "0.5", "--seed", "3"]  # fmt: skip
    command = [sys.executable, "-m", "pagoda.cli", "bench", "serve", "--base-url", server.url,
               "--workload", "random-ids", "--vocab-size", str(VOCAB), "--ignore-eos",
               "--request-rate", "50", "--result-file", str(result_file), *flags]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(result_file.read_text())
    drawn = random_requests(12, 40, 16, 0.5, VOCAB, seed=3)
    assert report["completed"] == 12 and report["failed"] == 0
    assert report["total_prompt_tokens"] == sum(len(prompt) for prompt, _ in drawn)
    assert report["total_output_tokens"] == sum(length for _, length in drawn)
    assert report["total_chunks"] == report["total_output_tokens"]  # one chunk a token
    assert 0 < report["itl"]["p50_ms"] <= report["itl"]["p99_ms"]


def test_random_ids_need_the_vocabulary_size(tmp_path):
    command = [sys.executable, "-m", "pagoda.cli", "bench", "serve", "--base-url",
               "http://127.0.0.1:9", "--workload", "random-ids"]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode != 0 and "--vocab-size" in run.stderr

"""`pagoda generate --tensor-parallel-size N` as users run it: a real process tree."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.engine.executor.test_tp_failures import alive, wait_until
from tests.test_cli import ENV, pagoda

pytestmark = pytest.mark.slow
LONG_RUN = ("--tensor-parallel-size", "2", "--max-tokens", "1500", "--prompt", "once upon")
PROMPTS = ("--prompt", "hello world", "--prompt", "the paged cache is", "--max-tokens", "12")


def test_two_ranks_print_what_one_process_prints(llama_dir):
    one = pagoda("generate", str(llama_dir), *PROMPTS, "--dtype", "float32")
    two = pagoda("generate", str(llama_dir), *PROMPTS, "--tensor-parallel-size", "2")
    assert two.returncode == 0, two.stderr
    assert two.stdout == one.stdout
    assert "tensor-parallel workers stopped" in two.stderr


def start_long_generation(llama_dir) -> tuple[subprocess.Popen, int]:
    """`pagoda generate` with 2 ranks, running; its worker's pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pagoda.cli", "generate", str(llama_dir), *LONG_RUN],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=ENV,
    )
    worker_pid = None
    for line in process.stderr:
        if "started tensor-parallel worker rank 1" in line:
            worker_pid = int(line.rsplit("pid ", 1)[1].rstrip(")\n"))
        if "KV cache:" in line:  # both ranks ready: generation starts now
            break
    assert worker_pid is not None
    time.sleep(0.5)
    return process, worker_pid


def test_a_killed_worker_exits_nonzero_naming_the_rank(llama_dir):
    process, worker_pid = start_long_generation(llama_dir)
    subprocess.run(["kill", "-9", str(worker_pid)], check=True)
    stderr = process.stderr.read()
    assert process.wait(timeout=30) == 1
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith("pagoda generate: error: tensor-parallel worker rank 1")
    assert "killed by SIGKILL" in last_line


def test_workers_exit_when_rank_0_is_killed(llama_dir):
    process, worker_pid = start_long_generation(llama_dir)
    process.kill()
    process.wait(timeout=10)
    assert wait_until(lambda: not alive(worker_pid), timeout=10) < 10


def test_a_script_that_never_shuts_down_still_exits_and_leaves_no_worker(llama_dir):
    script = (
        "from pagoda.engine import LLM, SamplingParams\n"
        f"llm = LLM({str(llama_dir)!r}, tensor_parallel_size=2)\n"
        "llm.generate('hello', SamplingParams(max_tokens=2))\n"
        "print(*(w.process.pid for w in llm.engine.core.executor.workers))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=ENV, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not alive(int(done.stdout.split()[-1]))

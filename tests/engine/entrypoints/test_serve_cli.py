"""`pagoda serve` refuses bad flags before anything starts: exit 2 and one clear line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pagoda.cli import main
from tests.engine.entrypoints.live_server import ENV

LORA = ["--enable-lora"]
REFUSED = [
    (["--lora-modules", "sql=/adapters/sql"], "--lora-modules needs --enable-lora"),
    ([*LORA, "--lora-modules", "no-path"], "NAME=PATH"),
    ([*LORA, "--lora-modules", '{"name": "x"'], "is not valid JSON"),
    ([*LORA, "--lora-modules", '{"name": "x", "path": "/p", "alpha": 1}'], "name, path and"),
    ([*LORA, "--lora-modules", "a=/p", "a=/q"], "names a more than once"),
    ([*LORA, "--lora-modules", "tiny=/p", "--served-model-name", "tiny"], "rename it"),
    ([*LORA, "--lora-modules", "sql=/adapters/sql"], "--lora-modules sql: LoRA adapter folder"),
    (["--enable-runtime-lora-updating"], "needs --enable-lora"),
    ([*LORA, "--max-loras", "0"], "max_loras must be a positive integer"),
    ([*LORA, "--max-lora-rank", "1024"], "max_lora_rank must be at most 512"),
    ([*LORA, "--max-loras", "4", "--max-cpu-loras", "2"], "max_cpu_loras (2) must be at least"),
    (["--tensor-parallel-size", "3"], "tensor_parallel_size=3 must divide"),
    (["--max-model-len", "999999"], "max_model_len"),
    (["--port", "70000"], "--port"),
    (["--max-waiting-requests", "-1"], "--max-waiting-requests"),
    (["--chat-template", "/no/such/template.jinja"], "neither a file nor a Jinja template"),
    (["--chat-template", "{% for m in messages %}{{ m.content }}"], "does not compile"),
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice needs --tool-call-parser"),
]


@pytest.mark.parametrize(("flags", "message"), REFUSED, ids=[r[1][:32] for r in REFUSED])
def test_bad_flags_exit_2_with_a_clear_message(llama_dir, flags, message, capsys):
    # In process (the checks run before any server starts); a subprocess test is below.
    assert main(["serve", str(llama_dir), *flags]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_tool_call_parser_is_refused_naming_those_served(llama_dir, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's own check of the choices
        main(["serve", str(llama_dir), "--tool-call-parser", "pythonic"])
    assert exited.value.code == 2
    assert "'hermes', 'llama3_json', 'mistral'" in capsys.readouterr().err


def test_a_missing_model_folder_is_refused_by_the_real_command(tmp_path):
    command = [sys.executable, "-m", "pagoda.cli", "serve", str(tmp_path / "nowhere")]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 2 and "does not exist" in result.stderr

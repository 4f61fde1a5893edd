"""The `pagoda` command as users run it: a real subprocess, exit codes and messages."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def pagoda(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pagoda.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )


def test_make_tiny_model_then_generate(tmp_path):
    made = pagoda("make-tiny-model", str(tmp_path / "m"), "--arch", "qwen3", "--seed", "2")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "m" / "model.safetensors").exists()
    result = pagoda("generate", str(tmp_path / "m"), "--prompt", "hello", "--max-tokens", "5")
    assert result.returncode == 0, result.stderr
    assert "--- 'hello'" in result.stdout
    piped = pagoda("generate", str(tmp_path / "m"), "--max-tokens", "3", stdin="a\nb\n")
    assert piped.stdout.count("--- ") == 2


def test_bad_input_exits_2_with_one_clear_line(tmp_path, llama_dir):
    missing = pagoda("generate", str(tmp_path / "nowhere"), "--prompt", "x")
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    bad = pagoda("generate", str(llama_dir), "--prompt", "x", "--temperature", "-1")
    assert bad.returncode == 2 and "temperature" in bad.stderr
    arch = pagoda("make-tiny-model", str(tmp_path / "x"), "--arch", "gpt2")
    assert arch.returncode == 2 and "invalid choice" in arch.stderr
    overlap = pagoda(
        "generate",
        str(llama_dir),
        "--prompt",
        "x",
        "--tensor-parallel-size",
        "2",
        "--async-scheduling",
    )  # refused before any worker starts
    assert overlap.returncode == 2 and "async_scheduling needs" in overlap.stderr
    dtype = pagoda("generate", str(llama_dir), "--prompt", "x", "--kv-cache-dtype", "int4")
    assert dtype.returncode == 2 and "invalid choice: 'int4'" in dtype.stderr


def test_generate_with_a_float8_kv_cache(llama_dir):
    result = pagoda(
        "generate",
        str(llama_dir),
        "--prompt",
        "hello",
        "--max-tokens",
        "4",
        "--kv-cache-dtype",
        "fp8",
    )
    assert result.returncode == 0, result.stderr
    assert "--- 'hello'" in result.stdout


def test_version_and_help():
    assert pagoda("--version").stdout.startswith("pagoda ")
    help_text = pagoda("--help").stdout
    assert "make-tiny-model" in help_text and "generate" in help_text


def _options(parser: argparse.ArgumentParser, path: str):
    """(command path, flag) for every argument of every subcommand, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield path, action


def test_every_flag_of_every_command_has_a_help_line():
    from pagoda.cli import build_parser

    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in _options(build_parser(), "pagoda")
        if not (action.help or "").strip()
    ]
    assert missing == []

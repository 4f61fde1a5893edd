"""The engine's hottest Triton kernels, compiled for sm_90 (H100/H200) on any machine,
spill no registers at Llama-3.1-8B shapes and their launch settings (a spill is a round
trip to local memory in the loop of a bandwidth-bound kernel, invisible on a CPU).

The compiles run in a child process without TRITON_INTERPRET, which this session sets
when there is no GPU (tests/conftest.py) and under which nothing compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kernel_registers

REPO = Path(__file__).resolve().parents[3]

COMPILE_ALL = """
import dataclasses, json
from bench import kernel_registers as k
cases = k.all_cases()
prefill = k.rope_and_store_cases()[0]
# rope_and_store's V tile of every head: its layout before tiles of 16 tokens of a head
cases.append(dataclasses.replace(prefill, name="every head's V tile",
                                 constants=prefill.constants | {"V_HEADS": 8, "V_HEAD_GROUPS": 1}))
print(json.dumps({case.name: dataclasses.asdict(k.compile_usage(case)) for case in cases}))
"""


@pytest.fixture(scope="module")
def usage() -> dict[str, dict]:
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_ALL],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [case.name for case in kernel_registers.all_cases()])
def test_the_kernel_spills_no_registers(usage, name):
    assert usage[name]["spilled_bytes"] == 0, f"{name}: {usage[name]}"
    assert usage[name]["blocks_per_sm"] >= 1


def test_a_tile_too_large_for_the_registers_is_caught(usage):
    """rope_and_store's V tile of every head needed more than 255 registers a thread: the
    check sees the spill, and the two blocks an SM it left room for."""
    every_head = usage["every head's V tile"]
    assert every_head["registers"] == 255 and every_head["spilled_bytes"] > 0
    assert every_head["blocks_per_sm"] == 2

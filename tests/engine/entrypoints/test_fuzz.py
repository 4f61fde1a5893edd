"""Schemathesis, a property-based HTTP fuzzer, against the live server's OpenAPI schema:
thousands of generated bodies (valid, invalid, absurd) and not one 5xx."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.engine.entrypoints.live_server import API_KEY, ENV

# Fixed so a failure reproduces; set PAGODA_FUZZ_SEED to explore elsewhere.
SEED = os.environ.get("PAGODA_FUZZ_SEED", "20261129")


def test_no_generated_request_gets_a_server_error(start_server, tmp_path):
    # Small limits keep each generated request cheap (n x max_tokens is bounded).
    server = start_server(
        "--api-key", API_KEY, "--max-model-len", "96", "--max-num-seqs", "8",
        "--max-waiting-requests", "8", "--no-access-log",
    )  # fmt: skip
    st = Path(sys.executable).with_name("st")
    command = [
        str(st), "run", f"{server.url}/openapi.json",
        "--header", f"Authorization: Bearer {API_KEY}",
        "--checks", "not_a_server_error",
        "--phases", "coverage,fuzzing",
        "--max-examples", "40",
        "--seed", SEED,
        "--request-timeout", "60",
        "--workers", "1",  # hypothesis' lambda introspection is not thread-safe on 3.11
        "--generation-database", "none",
        "--no-color",
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=600
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert "No issues found" in result.stdout, result.stdout[-6000:]
    assert server.process.poll() is None  # and the server is still up
    server.wait_idle()

"""pagoda bench's pictures (engine/benchmarks/plots.py): a serving report and an
autoscaler soak are drawn as PNG files beside their JSON, tokens over time add up to the
tokens generated, and a file with nothing to draw is refused with a message."""

from __future__ import annotations

import json
import struct

import pytest

from pagoda.cli import main
from pagoda.engine.benchmarks.plots import _tokens_per_second, plot_beside
from pagoda.engine.benchmarks.report import RequestResult, summarize


def png_size(path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def serve_report() -> dict:
    results = [
        RequestResult(
            success=True, sent_at=i * 0.5, latency=1.0 + i * 0.1,
            chunk_times=[0.05 + 0.01 * i + 0.1 * k for k in range(10)], output_tokens=10,
        )
        for i in range(20)
    ]  # fmt: skip
    results.append(RequestResult(error="HTTP 500: boom"))
    return summarize(results, duration=12.0)


def test_a_serve_report_is_drawn_beside_its_json(tmp_path):
    result = tmp_path / "serve.json"
    result.write_text(json.dumps(serve_report()))
    png = plot_beside(result)
    assert png == tmp_path / "serve.png"
    width, height = png_size(png)
    assert width > 800 and height > 300


def test_the_report_keeps_each_finished_request():
    report = serve_report()
    assert report["requests"]["fields"] == ["sent_s", "ttft_s", "latency_s", "output_tokens"]
    assert len(report["requests"]["rows"]) == report["completed"] == 20
    assert report["requests"]["rows"][2] == [1.0, 0.07, 1.2, 10]


def test_tokens_over_time_add_up_to_the_tokens_generated():
    rows = [
        dict(zip(("sent_s", "ttft_s", "latency_s", "output_tokens"), row, strict=True))
        for row in serve_report()["requests"]["rows"]
    ]
    seconds, tokens = _tokens_per_second(rows)
    assert sum(tokens) == pytest.approx(200)
    assert seconds[0] == 0 and len(seconds) == len(tokens)


def test_an_autoscaler_soak_is_drawn_through_the_cli(tmp_path):
    trace = [[0.0, 1, None, None, None, None, None]] + [
        [5.0 * i, 1 + i // 4, 1 + (i + 1) // 4, "Stable", "queueDepth", 3.5, 4] for i in range(12)
    ]
    fields = ["seconds", "replicas", "desired", "mode", "signal", "per_replica", "target"]
    record = {
        "config": {"autoscaling": {"targetQueueDepth": 4}},
        "results": {
            "requests_ok": 100, "requests_failed": 0, "trace": trace, "trace_fields": fields,
        },
    }  # fmt: skip
    result = tmp_path / "soak.json"
    result.write_text(json.dumps(record))
    assert main(["bench", "plot", str(result)]) == 0
    assert png_size(tmp_path / "soak.png")[0] > 800


def test_a_file_with_nothing_to_draw_is_refused(tmp_path):
    result = tmp_path / "other.json"
    result.write_text(json.dumps({"figures": {}}))
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_beside(result)
    result.write_text("Successful requests: 12")  # the printed report, not its JSON
    with pytest.raises(ValueError, match="is not a JSON result file"):
        plot_beside(result)

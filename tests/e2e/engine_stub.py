"""A stand-in for `pagoda serve` in pods the operator creates: a real HTTP process on
the pod's IP with the engine's probe and scrape endpoints (/health, /metrics,
/v1/models), and a drain on SIGTERM, for tests of what the operator builds around the
engine; tests that need the engine itself back pods with the real `pagoda serve`
(`operator_env.serve_real_engines`).

With `--fail-requests`, every completion or chat request gets a 500 with OpenAI's error
body: a broken engine that still passes its health checks (a bad canary revision).

Run as a script (never `-m` from the repository root): `python engine_stub.py --host H
--port P --model NAME [--fail-requests]`.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS = """# TYPE pagoda:num_requests_waiting gauge
pagoda:num_requests_waiting{{model_name="{model}"}} 0.0
# TYPE pagoda:num_requests_running gauge
pagoda:num_requests_running{{model_name="{model}"}} 0.0
# TYPE pagoda:kv_cache_usage_perc gauge
pagoda:kv_cache_usage_perc{{model_name="{model}"}} 0.0
"""


FAILED = {"error": {"message": "the engine failed", "type": "server_error", "code": 500}}


def handler(model: str, fail_requests: bool = False) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self.send_error(404)
                return
            if not fail_requests:
                self.send_error(501, "the stub serves no requests: back the pod with pagoda-serve")
                return
            data = json.dumps(FAILED).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            routes = {
                "/health": ("application/json", json.dumps({"status": "ok"})),
                "/metrics": ("text/plain; version=0.0.4", METRICS.format(model=model)),
                "/v1/models": (
                    "application/json",
                    json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}),
                ),
            }
            if self.path not in routes:
                self.send_error(404)
                return
            content_type, body = routes[self.path]
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # probes every few seconds: keep logs short
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="stub")
    parser.add_argument("--fail-requests", action="store_true")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), handler(args.model, args.fail_requests))
    # SIGTERM: stop accepting, finish in-flight requests, exit (the engine's drain)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"engine stub for {args.model} on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

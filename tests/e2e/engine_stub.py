"""A stand-in for `pagoda serve` in pods the operator creates: a real HTTP process on
the pod's IP with the engine's probe and scrape endpoints (/health, /metrics,
/v1/models), and a drain on SIGTERM, for tests of what the operator builds around the
engine; tests that need the engine itself back pods with the real `pagoda serve`
(`operator_env.serve_real_engines`).

Run as a script (never `-m` from the repository root): `python engine_stub.py --host H
--port P --model NAME`.
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


def handler(model: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), handler(args.model))
    # SIGTERM: stop accepting, finish in-flight requests, exit (the engine's drain)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"engine stub for {args.model} on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

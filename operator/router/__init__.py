"""`pagoda router`: the front door of an InferenceService (or of a static list of engines).

An OpenAI-compatible proxy that sends each request to one engine, chosen among the
engines that are ready, not terminating and passed the router's own health check, by
load, prompt-prefix affinity, adapter residency and revision weights; retried on another
engine before the first response byte; held while no engine is routable.

- `engines.py`: the set of engines and what the router knows of each;
- `discovery.py`: where engines come from (`--endpoints`, or the pods of an
  InferenceService watched through the Kubernetes API);
- `probes.py`: the health checks and the scrapes of load and adapters;
- `prefix.py`, `scoring.py`: the pure parts of the choice;
- `holding.py`: requests waiting for an engine; `proxy.py`: forwarding;
- `app.py`: the HTTP server; `metrics.py`: `pagoda_router:` metrics; `cli.py`.
"""

"""LoRA adapters of spec.adapters onto every engine pod: `plan.py` decides (pure),
`engine.py` speaks the engine's adapter API, `loop.py` runs a round per InferenceService
and writes `status.adapters` and the pods' readiness gate."""

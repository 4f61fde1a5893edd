"""Canary rollouts of a new model revision (spec.rollout.strategy: Canary): `canary.py`
decides each step (pure), `plan.py` says which revisions' Deployments run with how many
replicas, and `loop.py` runs a round per InferenceService: it reads the routers' counts
per revision, advances or rolls back, and writes `status.rollout`, whose weights the
routers apply."""

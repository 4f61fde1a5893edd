"""The Kubernetes operator, importable as `pagoda.operator`.

It reconciles `InferenceService` resources into GPU pods running the engine; see
DESIGN.md's operator architecture. The code arrives with the operator issue.
"""

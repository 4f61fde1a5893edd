"""Pagoda: serve large language models on Kubernetes.

`pagoda.engine` (source in `engine/`) is the inference engine and `pagoda.operator`
(source in `operator/`) the Kubernetes operator; this package holds only the shared
command-line entry point.
"""

__version__ = "0.1.0"

"""`pagoda bench`: reproducible GPU benchmarks with the HF transformers peer in the same run."""

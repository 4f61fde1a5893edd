"""`pagoda bench …`: serving load tests, and GPU workloads with the HF peer in the same run."""

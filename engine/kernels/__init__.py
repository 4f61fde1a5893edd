"""Attention kernels: a pure-torch reference (CPU, the oracle in tests) and Triton (GPU)."""

"""Tensor parallelism: which slice of each weight a rank owns, and the collectives."""

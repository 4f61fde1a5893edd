"""Chained hashes of full KV-cache blocks: the keys of the prefix cache.

A block's hash covers its parent's hash, its own token ids and, for the first block only,
the keys that must keep caches apart (adapter id, cache salt). Equal hashes therefore mean
equal prefixes, so a block can be shared by every request whose prompt starts the same.
SHA-256 keeps collisions out of reach, and the per-engine seed keeps hashes unguessable
across deployments (a cache-timing side channel otherwise).
"""

from __future__ import annotations

import hashlib
import os
import struct
from array import array


def make_root_hash(seed: int | None = None) -> bytes:
    """The parent hash of every first block: random per engine unless seeded."""
    material = os.urandom(32) if seed is None else struct.pack("<q", seed)
    return hashlib.sha256(b"pagoda-prefix-cache" + material).digest()


def hash_block(parent: bytes, token_ids: list[int], extra_keys: tuple = ()) -> bytes:
    digest = hashlib.sha256(parent)
    digest.update(array("q", token_ids).tobytes())
    if extra_keys:
        digest.update(repr(extra_keys).encode())
    return digest.digest()


def extend_block_hashes(
    block_hashes: list[bytes],
    token_ids_slice,
    num_tokens: int,
    block_size: int,
    root: bytes,
    extra_keys: tuple,
) -> None:
    """Append hashes for every full block of `num_tokens` tokens not hashed yet.

    `token_ids_slice(start, end)` returns the tokens in [start, end).
    """
    num_full = num_tokens // block_size
    for index in range(len(block_hashes), num_full):
        parent = block_hashes[-1] if block_hashes else root
        tokens = token_ids_slice(index * block_size, (index + 1) * block_size)
        block_hashes.append(hash_block(parent, tokens, extra_keys if index == 0 else ()))

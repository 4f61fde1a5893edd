"""Which engine has recently served which prompt prefixes: an approximate index.

A prompt's text is cut into fixed-size chunks and hashed as a chain (each hash covers the
chunk and everything before it, and the adapter), so two prompts share their first k
hashes exactly when they share their first k chunks. The index remembers, per hash,
which engines served it and when; it holds at most `max_hashes` (least recently used
dropped first), so its memory is bounded whatever the traffic. It is approximate in both
directions — an engine may have evicted a prefix the index still credits it with, and
prompts sent elsewhere are unknown — which is all routing needs: a good guess of where
the KV blocks of a prefix are.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable

from pagoda.operator.router.settings import DEFAULT_CHUNK_CHARS

DEFAULT_MAX_HASHES = 200_000


def chunk_hashes(
    text: str, adapter: str | None, chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> list[bytes]:
    """Chained hashes of the text's full chunks (a partial last chunk is left out: no
    engine caches a partial block either)."""
    previous = hashlib.blake2b((adapter or "").encode(), digest_size=16).digest()
    hashes = []
    data = text.encode("utf-8", errors="surrogatepass")
    for start in range(0, len(data) - chunk_chars + 1, chunk_chars):
        previous = hashlib.blake2b(
            previous + data[start : start + chunk_chars], digest_size=16
        ).digest()
        hashes.append(previous)
    return hashes


class PrefixIndex:
    def __init__(self, max_hashes: int = DEFAULT_MAX_HASHES) -> None:
        self.max_hashes = max_hashes
        self._engines: OrderedDict[bytes, dict[str, float]] = (
            OrderedDict()
        )  # hash -> engine -> time

    def __len__(self) -> int:
        return len(self._engines)

    def matched(self, hashes: list[bytes], engines: Iterable[str]) -> dict[str, int]:
        """For each engine, how many leading chunks of the prompt it served recently."""
        depth = dict.fromkeys(engines, 0)
        alive = set(depth)
        for index, digest in enumerate(hashes):
            holders = self._engines.get(digest)
            if not holders:
                break
            alive &= holders.keys()
            if not alive:
                break
            for name in alive:
                depth[name] = index + 1
        return depth

    def record(self, hashes: list[bytes], engine: str, now: float) -> None:
        """The engine was sent this prompt: credit it with every chunk of it."""
        for digest in hashes:
            holders = self._engines.get(digest)
            if holders is None:
                holders = self._engines[digest] = {}
            else:
                self._engines.move_to_end(digest)
            holders[engine] = now
        while len(self._engines) > self.max_hashes:
            self._engines.popitem(last=False)

    def forget(self, engine: str) -> None:
        """An engine left (or restarted with an empty cache): it holds no prefix."""
        for digest in list(self._engines):
            holders = self._engines[digest]
            holders.pop(engine, None)
            if not holders:
                del self._engines[digest]

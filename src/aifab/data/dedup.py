"""Near-duplicate text detection: MinHash signatures over shingles and LSH banding, in numpy.

Texts arrive in row order, in batches; a text is a near-duplicate when its estimated Jaccard
similarity to an earlier *kept* text reaches the threshold, so the first occurrence survives.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_ROLL = np.uint64(0x100000001B3)
#: Shingles per numpy chunk: about this times num_perm times 8 bytes of scratch memory.
_CHUNK = 1 << 13

_WORD = re.compile(r"\w+")

Unit = Literal["char", "word"]


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: spreads rolling-hash values over all 64 bits."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def normalize(text: str) -> str:
    """Case-fold and collapse whitespace, so spacing and case do not make texts distinct."""
    return " ".join(text.casefold().split())


def _units(texts: Sequence[str], unit: Unit, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated unit codes (chars or word hashes), each text followed by ``size`` zeros.

    The padding lets every text, even one shorter than a shingle, own at least one window that
    never reaches into the next text. Returns the codes and each text's unit count.
    """
    pad = size
    if unit == "char":
        sep = "\0" * pad
        codes = np.frombuffer((sep.join(texts) + sep).encode("utf-32-le"), dtype=np.uint32)
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        return codes.astype(np.uint64), lengths
    flat: list[int] = []
    lengths_list: list[int] = []
    for t in texts:
        words = _WORD.findall(t)
        flat.extend(zlib.crc32(w.encode()) | 1 for w in words)
        flat.extend([0] * pad)
        lengths_list.append(len(words))
    return np.asarray(flat, dtype=np.uint64), np.asarray(lengths_list, dtype=np.int64)


def shingle_hashes(
    texts: Sequence[str], unit: Unit = "char", size: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """32-bit hashes of every ``size``-long shingle; returns (hashes, shingles per text)."""
    codes, lengths = _units(texts, unit, size)
    total = len(codes) - size + 1
    rolled = np.zeros(max(total, 0), dtype=np.uint64)
    for j in range(size):
        rolled = rolled * _ROLL + codes[j : j + total]
    counts = np.maximum(lengths - size + 1, 1)
    doc_start = np.concatenate(([0], np.cumsum(lengths + size)[:-1]))
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    positions = np.repeat(doc_start - first, counts) + np.arange(int(counts.sum()))
    return _mix(rolled[positions]) >> np.uint64(32), counts


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The odd multipliers ``a`` and offsets ``b`` of ``num_perm`` multiply-shift hashes."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 1 << 63, size=num_perm, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 1 << 63, size=num_perm, dtype=np.uint64)
    return a, b


def minhash(
    hashes: np.ndarray, counts: np.ndarray, perms: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """MinHash signatures (texts x num_perm, uint32) from shingle hashes grouped by text.

    Each permutation is ``(a * x + b) >> 32`` on 64-bit words (multiply-shift hashing), which
    needs no modulo. Work runs in chunks laid out permutation-major so that the per-text
    minimum (``reduceat``) walks contiguous memory.
    """
    a, b = perms[0][:, None], perms[1][:, None]
    doc_of = np.repeat(np.arange(len(counts)), counts)
    out = np.full((len(a), len(counts)), _MASK32, dtype=np.uint64)
    for lo in range(0, len(hashes), _CHUNK):
        docs = doc_of[lo : lo + _CHUNK]
        vals = (a * hashes[lo : lo + _CHUNK] + b) >> np.uint64(32)
        starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        seg_min = np.minimum.reduceat(vals, starts, axis=1)
        ids = docs[starts]
        # Only the first text of a chunk can have shingles in an earlier chunk.
        out[:, ids[0]] = np.minimum(out[:, ids[0]], seg_min[:, 0])
        out[:, ids[1:]] = seg_min[:, 1:]
    return np.ascontiguousarray(out.T).astype(np.uint32)


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """Bands and rows per band minimising equal-weight false positive and negative areas."""
    s = np.linspace(0.0, 1.0, 201)
    best, best_err = (1, num_perm), float("inf")
    for bands in range(1, num_perm + 1):
        rows = num_perm // bands
        p = 1.0 - (1.0 - s**rows) ** bands
        err = float(np.trapezoid(np.where(s < threshold, p, 1.0 - p), s))
        if err < best_err:
            best, best_err = (bands, rows), err
    return best


def _band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    keys = np.zeros((len(sig), bands), dtype=np.uint64)
    for r in range(rows):
        keys = keys * _ROLL + sig[:, r::rows][:, :bands].astype(np.uint64)
    return keys


class NearDuplicateFinder:
    """Streams texts in row order and says which are near-duplicates of earlier kept ones.

    Kept signatures are stored as 16-bit values (about ``2 * num_perm`` bytes per kept text);
    a 16-bit collision raises a similarity estimate by at most 1/65536.
    """

    def __init__(
        self,
        threshold: float = 0.85,
        *,
        unit: Unit = "char",
        size: int = 5,
        num_perm: int = 128,
        seed: int = 1,
    ) -> None:
        self.threshold = threshold
        self.unit: Unit = unit
        self.size = size
        self.perms = permutations(num_perm, seed)
        self.bands, self.rows = lsh_params(threshold, num_perm)
        self._buckets: list[dict[int, list[int]]] = [{} for _ in range(self.bands)]
        self._kept = np.zeros((1024, num_perm), dtype=np.uint16)
        self._n = 0

    def _keep(self, sig16: np.ndarray, keys: list[int]) -> None:
        if self._n == len(self._kept):
            self._kept = np.concatenate([self._kept, np.zeros_like(self._kept)])
        self._kept[self._n] = sig16
        for bucket, key in zip(self._buckets, keys, strict=True):
            bucket.setdefault(key, []).append(self._n)
        self._n += 1

    def duplicates(self, texts: Sequence[str | None]) -> np.ndarray:
        """Positions in ``texts`` that are near-duplicates (``None`` is never one)."""
        present = [i for i, t in enumerate(texts) if t is not None]
        if not present:
            return np.zeros(0, dtype=np.int64)
        norm = [normalize(texts[i]) for i in present]  # type: ignore[arg-type]
        sig = minhash(*shingle_hashes(norm, self.unit, self.size), self.perms)
        keys = _band_keys(sig, self.bands, self.rows).tolist()
        sig16 = sig.astype(np.uint16)
        dropped: list[int] = []
        for j, pos in enumerate(present):
            cands = {
                c
                for bucket, key in zip(self._buckets, keys[j], strict=True)
                for c in bucket.get(key, ())
            }
            if cands:
                idx = np.fromiter(cands, dtype=np.int64, count=len(cands))
                if (self._kept[idx] == sig16[j]).mean(axis=1).max() >= self.threshold:
                    dropped.append(pos)
                    continue
            self._keep(sig16[j], keys[j])
        return np.asarray(dropped, dtype=np.int64)


def near_duplicates(
    texts: Iterable[str | None],
    threshold: float = 0.85,
    *,
    unit: Unit = "char",
    size: int = 5,
    num_perm: int = 128,
    seed: int = 1,
) -> list[int]:
    """Positions of near-duplicate texts in one in-memory sequence (first occurrences kept)."""
    finder = NearDuplicateFinder(threshold, unit=unit, size=size, num_perm=num_perm, seed=seed)
    return [int(i) for i in finder.duplicates(list(texts))]

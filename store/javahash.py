"""Java ``String.hashCode`` and the hashes RocketMQ derives from it (tags code, index key hash).

Hashing runs for every tag and every index key at append time (and a slave's dispatch): every message
with a unique key hashes ``topic#key`` (~45 characters). Compiled (store/native.py), Horner's rule over
the bytes in ``i64`` arithmetic beats the earlier trick of parsing two base-31 numbers with ``int()``
(which interpreted Python ran faster than a loop); the pure build, a fallback, pays far more per key for
the loop instead (docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # only mypyc reads it (annotations are strings at run time): no runtime dependency
    from mypy_extensions import i64

_MASK: Final = 0xFFFFFFFF


def _hash32(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` as an unsigned 32-bit value (UTF-16 code units)."""
    h: i64 = 0
    i: i64 = 0
    if s.isascii():
        data = s.encode("ascii")
        n: i64 = len(data)
        while i < n:
            h = (h * 31 + data[i]) & _MASK
            i += 1
    else:
        # a character beyond the BMP is two code units, and a lone surrogate one, as in Java
        data = s.encode("utf-16-be", "surrogatepass")
        n = len(data)
        while i < n:
            h = (h * 31 + (data[i] << 8 | data[i + 1])) & _MASK
            i += 2
    return h


def java_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` (UTF-16 code units, 32-bit wrap, signed result)."""
    h = _hash32(s)
    return h - 0x100000000 if h & 0x80000000 else h


#: Tags codes memoised (a dict, not an lru_cache, whose call costs a put far more: see store.record).
_TAGS: Final[dict[str, int]] = {}
_TAGS_MAX: Final = 4096


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tags code: the signed hash sign-extended to i64; 0 for no or empty tags
    (docs/store-format.md §tags-and-keys)."""
    if not tags:
        return 0
    code = _TAGS.get(tags)
    if code is None:
        code = java_hash(tags)
        if len(_TAGS) >= _TAGS_MAX:
            _TAGS.clear()
        _TAGS[tags] = code
    return code


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, with Java's ``abs(MIN_VALUE)`` overflow mapped to 0
    (docs/store-format.md §index-keys-and-hash)."""
    h = _hash32(key)
    if h & 0x80000000:  # negative as a Java int: abs() is 2**32 - h, except MIN_VALUE which stays negative
        return 0 if h == 0x80000000 else 0x100000000 - h
    return h

"""Java ``String.hashCode`` and the hashes RocketMQ derives from it (tags code, index key hash).

Hashing runs for every tag and every index key at append time (and a slave's dispatch), so it avoids
a Python-level loop: ``h = sum(c[i] * 31**(n-1-i)) mod 2**32`` is, for ASCII, two base-31 numbers
``int()`` parses, and otherwise ``map(mul, ...)`` over precomputed powers of 31; both run in C.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from operator import mul

_MASK = 0xFFFFFFFF
_POWERS: dict[int, tuple[int, ...]] = {}
_LITTLE = sys.byteorder == "little"


def _powers(n: int) -> tuple[int, ...]:
    """``(31**(n-1), ..., 31, 1) mod 2**32`` — the Horner coefficients for a string of n code units."""
    p = _POWERS.get(n)
    if p is None:
        acc = [1] * n
        v = 1
        for i in range(n - 2, -1, -1):
            v = (v * 31) & _MASK
            acc[i] = v
        p = _POWERS[n] = tuple(acc)
    return p


#: ASCII code c -> the base-31 digits of c // 31 (0..4) and of c % 31 (0..30), as ``int(text, 31)`` reads.
_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_HIGH = bytes(_DIGITS[c // 31] if c < 128 else c for c in range(256))
_LOW = bytes(_DIGITS[c % 31] if c < 128 else c for c in range(256))
#: Longest string parsed as digits (plus one): the least limit sys.set_int_max_str_digits allows is 640.
_MAX_DIGITS = 639


def _hash32(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` as an unsigned 32-bit value (UTF-16 code units)."""
    if s.isascii():
        ascii_units = s.encode("ascii")
        if 0 < len(ascii_units) <= _MAX_DIGITS:
            # c = 31 * (c // 31) + c % 31, so sum(c[i] * 31**(n-1-i)) is two base-31 numbers that int()
            # parses in C: the c // 31 digits shifted one place, plus the c % 31 digits (5x faster)
            return (
                int(ascii_units.translate(_HIGH) + b"0", 31) + int(ascii_units.translate(_LOW), 31)
            ) & _MASK
        units: bytes | memoryview = ascii_units
    else:
        units = memoryview(s.encode("utf-16-le" if _LITTLE else "utf-16-be")).cast("H")
    return sum(map(mul, units, _powers(len(units)))) & _MASK


def java_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` (UTF-16 code units, 32-bit wrap, signed result)."""
    h = _hash32(s)
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """ConsumeQueue tags code: the signed hash sign-extended to i64; 0 for no or empty tags (§3.3)."""
    if not tags:
        return 0
    return java_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, with Java's ``abs(MIN_VALUE)`` overflow mapped to 0 (§5.5)."""
    h = _hash32(key)
    if h & 0x80000000:  # negative as a Java int: abs() is 2**32 - h, except MIN_VALUE which stays negative
        return 0 if h == 0x80000000 else 0x100000000 - h
    return h

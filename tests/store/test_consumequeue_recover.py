"""The bulk search for the end of a ConsumeQueue file's valid units agrees with walking them one by one."""

from __future__ import annotations

import random

from store.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, valid_units_end


def _walk(view: memoryview, length: int) -> int:
    pos = 0
    while pos < length:
        off, size, _tags = UNIT.unpack_from(view, pos)
        if off < 0 or size <= 0:
            break
        pos += CQ_STORE_UNIT_SIZE
    return pos


def test_valid_units_end_matches_the_unit_by_unit_walk() -> None:
    rng = random.Random(1)
    for _ in range(3000):
        n = rng.randint(0, 60)
        buf = bytearray(n * CQ_STORE_UNIT_SIZE)
        for i in range(rng.randint(0, n)):
            off = rng.choice([0, 5, 1 << 40])
            UNIT.pack_into(buf, i * 20, off, rng.choice([1, 0x7FFFFFFF, 256, 1 << 24]), rng.randint(-5, 5))
        for _ in range(rng.choice([0, 0, 1, 2])):  # damage: negative offset, zero size, zeros, garbage
            if n:
                i = rng.randrange(n) * 20
                kind = rng.randrange(4)
                if kind == 0:
                    UNIT.pack_into(buf, i, -1, 5, 0)
                elif kind == 1:
                    UNIT.pack_into(buf, i, 5, 0, 0)
                elif kind == 2:
                    buf[i : i + 20] = bytes(20)
                else:
                    buf[i : i + 20] = rng.randbytes(20)
        view = memoryview(bytes(buf))
        assert valid_units_end(view, len(buf)) == _walk(view, len(buf)), bytes(buf).hex()

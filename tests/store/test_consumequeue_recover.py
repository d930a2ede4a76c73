"""The bulk search for the end of a ConsumeQueue file's valid units agrees with walking them one by one,
and so does the batched write of units with writing them one by one."""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from store.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue, valid_units_end


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


def _queue_bytes(root: Path) -> dict[str, bytes]:
    d = root / "T" / "0"
    return {name: (d / name).read_bytes() for name in sorted(os.listdir(d))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["next", "next", "next", "same", "skip", "back"]), min_size=1, max_size=80))
def test_put_units_writes_what_put_unit_writes_one_by_one(tmp_path: Path, steps: list[str]) -> None:
    """A replica's batched units (one copy per file) equal the unit-by-unit rules: runs across file ends,
    a queue offset seen twice, a gap, an offset going back, a record already dispatched."""
    units, queue_offset, phys = [], 3, 1000
    for step in steps:
        queue_offset += {"next": 1, "same": 0, "skip": 2, "back": -1}[step]
        phys += 100 if step != "back" else -50
        units.append((phys, 60, queue_offset % 3, max(queue_offset, 0)))
    root = tmp_path / str(len(list(tmp_path.iterdir())))
    one = ConsumeQueue(str(root / "one"), "T", 0, 7 * 20)
    batch = ConsumeQueue(str(root / "batch"), "T", 0, 7 * 20)
    for cq in (one, batch):
        cq.put_unit(950, 60, 0, 3)  # the queue so far
    for unit in units:
        one.put_unit(*unit)
    batch.put_units(list(units))
    assert _queue_bytes(root / "batch") == _queue_bytes(root / "one")
    assert (batch.max_physic_offset, batch.max_offset) == (one.max_physic_offset, one.max_offset)
    one.close()
    batch.close()

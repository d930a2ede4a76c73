"""The compiled build's CRC-32 (``store/_cparse.c``'s ``crc32_of``: folded by PCLMULQDQ where the CPU has
it, zlib's elsewhere) against ``zlib.crc32`` and ``binascii.crc32``, bit for bit: every length around the
fold's steps (64 bytes to start, 16 a step after, the tail of fewer through zlib), any start value, any
alignment, every buffer type the store hands it (bytes, bytearray, a memoryview of a mapped file). Where
it is used: a record's BODYCRC (``record.body_crc``, the encode, recovery's and a pull's checks), an
entry's ``bodyCrc`` (``dledger.entry_body_crc``) and a binary push's scan. Skipped without the build."""

from __future__ import annotations

import binascii
import mmap
import platform
import zlib
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from store import dledger as dl, record

c = pytest.importorskip("store._cparse")

#: lengths about each of the fold's edges: below 64 (zlib alone), 64 and a tail, steps of 16 after
EDGES = sorted({n + d for n in (0, 16, 32, 48, 64, 80, 128, 1024, 1100, 4096) for d in (-1, 0, 1, 15)} - {-1})


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize("n", EDGES)
def test_every_length_about_the_fold_edges_matches_zlib(n: int) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(n))
    for value in (0, 1, 0xFFFFFFFF, 0x12345678):
        want = zlib.crc32(data, value)
        assert c.crc32(data, value) == want == binascii.crc32(data, value)
    assert c.crc31(data) == zlib.crc32(data) & 0x7FFFFFFF


@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1), st.integers(0, 15))
def test_any_bytes_value_and_alignment_match_zlib(data: bytes, value: int, skew: int) -> None:
    # a memoryview skewed off the allocation's alignment: the fold loads unaligned
    view = memoryview(bytes(skew) + data)[skew:]
    assert c.crc32(view, value) == zlib.crc32(data, value)
    assert c.crc32(bytearray(data)) == zlib.crc32(data)
    assert c.crc31(view) == zlib.crc32(data) & 0x7FFFFFFF


@given(st.binary(min_size=64, max_size=2000), st.data())
def test_a_crc_continued_over_pieces_is_the_whole_one(data: bytes, draw: st.DataObject) -> None:
    cut = draw.draw(st.integers(0, len(data)))
    assert c.crc32(data[cut:], c.crc32(data[:cut])) == zlib.crc32(data)


@given(st.binary(min_size=64, max_size=1200), st.data())
def test_one_flipped_bit_anywhere_changes_it_as_zlib_does(data: bytes, draw: st.DataObject) -> None:
    bit = draw.draw(st.integers(0, len(data) * 8 - 1))
    damaged = bytearray(data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    assert c.crc32(damaged) == zlib.crc32(damaged) != zlib.crc32(data)


def test_a_mapped_file_and_large_buffers(tmp_path: Path) -> None:
    path = tmp_path / "data"
    body = bytes(range(256)) * 4099 + b"tail"
    path.write_bytes(body)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        view = memoryview(mm)
        try:
            assert c.crc32(view) == zlib.crc32(body)
            assert c.crc32(view[3 : 3 + 70_001]) == zlib.crc32(body[3 : 3 + 70_001])
        finally:
            view.release()


def test_bad_arguments_are_type_errors() -> None:
    with pytest.raises(TypeError):
        c.crc32()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.crc32("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.crc31(b"x", 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.crc32(b"x", "1")  # type: ignore[arg-type]
    assert c.crc32(b"abc", -1) == zlib.crc32(b"abc", 0xFFFFFFFF)  # the value taken mod 2**32, as zlib's


def test_the_fold_is_taken_where_the_cpu_has_it() -> None:
    """On x86-64 with PCLMULQDQ and SSE4.1 the fold runs (so the tests above test it), else zlib."""
    expected = platform.machine() in ("x86_64", "AMD64") and {"pclmulqdq", "sse4_1"} <= cpu_flags()
    assert c.crc_folds() is expected


def test_the_store_computes_its_crcs_with_it() -> None:
    body = bytes(range(200)) * 6
    assert record._crc31 is c.crc31
    assert record.body_crc(body) == dl.entry_body_crc(bytearray(body)) == zlib.crc32(body) & 0x7FFFFFFF

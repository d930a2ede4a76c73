"""The store's C parses (_cparse.c): a record for dispatch, a pushed run of DLedger entries."""

from collections.abc import Callable
from mmap import mmap
from typing import Any

def v4_info(
    buf: bytes | bytearray | memoryview, pos: int, limit: int, /
) -> tuple[int, int, str, int, int, int, int, int, dict[str, str]] | None: ...
def scan_run(
    buf: bytes | bytearray | memoryview,
    off: int,
    start: int,
    at: int,
    base: int,
    file_size: int,
    prev_index: int,
    prev_term: int,
    /,
) -> tuple[int, int, int, int, bytes]: ...
def parse_entries(
    buf: bytes | bytearray | memoryview,
    off: int,
    end: int,
    room: int,
    parsed: dict[int, Any],
    make: Callable[..., Any],
    /,
) -> int: ...
def dispatch_entries(
    buf: bytes | bytearray | memoryview,
    off: int,
    end: int,
    expect: int,
    limit: int,
    units: dict[tuple[str, int], list[tuple[int, int, int, int]]],
    indexed: list[tuple[str, str | None, str | None, int, int]] | None,
    /,
) -> tuple[int, int, int, int]: ...
def pack_header(
    buf: bytes | bytearray | memoryview,
    at: int,
    magic: int,
    size: int,
    index: int,
    term: int,
    pos: int,
    body_crc: int,
    body_len: int,
    /,
) -> None: ...
def pack_index(
    buf: bytes | bytearray | memoryview, at: int, magic: int, pos: int, size: int, index: int, term: int, /
) -> None: ...
def place_entry(
    buf: bytes | bytearray | memoryview, at: int, index: int, term: int, pos: int, body: bytes, /
) -> int: ...
def index_entry(
    mm: mmap, entry_at: int, slot_at: int, key_hash: int, phy_offset: int, time_diff: int, n: int, /
) -> int | None: ...
def pack_unit(
    buf: bytes | bytearray | memoryview | mmap, at: int, phys: int, size: int, tags: int, /
) -> None: ...
def pack_units(
    buf: bytes | bytearray | memoryview | mmap,
    at: int,
    units: list[tuple[int, int, int, int]],
    start: int,
    count: int,
    /,
) -> None: ...
def split_numbers(
    buf: bytes | bytearray | memoryview, start: int, end: int, parts: tuple[bytes, ...], /
) -> tuple[int, ...] | None: ...
def crc32(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def crc31(data: bytes | bytearray | memoryview, /) -> int: ...
def crc_folds() -> bool: ...

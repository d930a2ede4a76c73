"""Mapped files: truncation clears what lies past the cut without filling the sparse file's holes."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import pytest

from store.engine import DefaultMessageStore
from store.indexfile import HASH_SLOT_SIZE, HUGE_PAGE, IndexFile
from store.mapped_file import MappedFile, MappedFileQueue
from store.message import Message
from store.quarantine import data_end
from tests.support.stores import small_config

SIZE = 1024 * 1024


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_truncation_zeroes_written_bytes_past_the_cut_and_skips_holes(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "q"), SIZE, clear_whole_tail=True, prepare_chunk=4096)
    mf = queue.last_file_for_append()
    if _allocated(Path(mf.path)) >= SIZE:
        pytest.skip("the file system does not keep files sparse")
    mf.mm[0:200] = b"\x01" * 200
    mf.mm[600_000:600_020] = b"\x02" * 20  # a stale unit far past the end, in a page of its own
    mf.wrote_position = 200
    assert mf.data_ranges(0, SIZE) == [(0, 4096), (598_016, 602_112)]
    queue.truncate_dirty_files(100)
    assert mf.wrote_position == 100
    assert bytes(mf.mm[0:100]) == b"\x01" * 100
    assert mf.mm[100:SIZE] == bytes(SIZE - 100)
    queue.flush()
    assert _allocated(Path(mf.path)) <= 2 * 4096  # the holes in between were left alone
    queue.close()


def test_a_read_only_file_finds_its_data_end_through_the_holes(tmp_path: Path) -> None:
    """``store verify`` opens files read-only: the end of their data comes from SEEK_DATA/SEEK_HOLE, not
    from reading the whole pre-allocated file (with no descriptor kept, it read every byte)."""
    queue = MappedFileQueue(str(tmp_path / "q"), SIZE, prepare_chunk=4096)
    mf = queue.last_file_for_append()
    if _allocated(Path(mf.path)) >= SIZE:
        pytest.skip("the file system does not keep files sparse")
    mf.mm[0:200] = b"\x01" * 200
    mf.mm[600_000:600_020] = b"\x02" * 20
    queue.flush()
    queue.close()
    reader = MappedFile(mf.path, SIZE, read_only=True)
    try:
        assert reader.data_ranges(0, SIZE) == [(0, 4096), (598_016, 602_112)]
        assert data_end(reader, 0) == 600_020
    finally:
        reader.close()
    assert reader.data_ranges(0, SIZE) == [(0, SIZE)]  # closed: no descriptor, the whole range


@pytest.mark.parametrize("keep_fd", [True, False])
def test_a_flush_waiting_on_the_disk_does_not_hold_back_the_writers_next_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_fd: bool
) -> None:
    """The flush thread's fdatasync waits for the disk; the writer reserving its next blocks (on the broker's
    event loop) must not wait for it too."""
    queue = MappedFileQueue(str(tmp_path / "q"), SIZE, keep_fd=keep_fd, prepare_chunk=4096)
    mf = queue.last_file_for_append()
    mf.mm[0:100] = b"\x01" * 100
    mf.wrote_position = 100
    syncing, release = threading.Event(), threading.Event()
    fdatasync = os.fdatasync

    def slow_disk(fd: int) -> None:
        syncing.set()
        assert release.wait(60)
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_disk)
    flusher = threading.Thread(target=mf.flush)
    flusher.start()
    try:
        assert syncing.wait(60)
        writer = threading.Thread(target=mf.prepare, args=(SIZE,), kwargs={"populate": False})
        writer.start()
        writer.join(60)
        assert not writer.is_alive(), "the writer waited for the flush's disk wait"
        assert mf.prepared_position == SIZE
    finally:
        release.set()
        flusher.join(60)
    assert mf.flushed_position == 100
    queue.close()


def test_restarts_keep_consume_queue_files_sparse(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=50_000 * 20)
    store = DefaultMessageStore(cfg)
    with store:
        for i in range(10):
            store.put_message(Message(topic="T", body=b"body-%d" % i, queue_id=0))
    cq = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    allocated = _allocated(cq)
    if allocated >= cq.stat().st_size:
        pytest.skip("the file system does not keep files sparse")
    for abort in (False, True):  # normal, then abnormal recovery
        if abort:
            (tmp_path / "abort").touch()
        with DefaultMessageStore(cfg) as again:
            assert again.last_exit_ok is not abort
            assert again.get_max_offset("T", 0) == 10
    assert _allocated(cq) == allocated


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count descriptors")
def test_consume_queue_files_hold_no_descriptor_of_their_own_and_still_flush(tmp_path: Path) -> None:
    """10,000 queues must not cost 20,000 descriptors: each ConsumeQueue file keeps only the one its
    mapping holds; flushing at shutdown opens one for the call."""
    store = DefaultMessageStore(small_config(tmp_path))
    with store:
        store.put_message(Message(topic="T0", body=b"warm", queue_id=0))
        before = _open_descriptors()
        for i in range(1, 41):
            store.put_message(Message(topic=f"T{i}", body=b"x", queue_id=0))
        assert _open_descriptors() - before <= 41  # one per new mapping, not two
    with DefaultMessageStore(small_config(tmp_path)) as again:
        assert [again.get_max_offset(f"T{i}", 0) for i in range(41)] == [1] * 41


def _vm_flags(path: str) -> set[str]:
    """The kernel's flags of this process's mapping of ``path`` (``rr``: read-ahead off, MADV_RANDOM)."""
    mapping = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            mapping = head[-1] == path
        elif mapping and line.startswith("VmFlags:"):
            return set(head[1:])
    raise AssertionError(f"{path} is not mapped")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc to read a mapping's flags")
def test_a_commit_log_file_is_written_without_read_around_until_it_is_full(tmp_path: Path) -> None:
    """The writer's first store into a page not yet cached faults; with read-around on, the kernel
    zero-fills its whole read-ahead window (megabytes) in that one fault, on the event loop. A full file
    gets read-ahead back for readers; ConsumeQueues never had it."""
    store = DefaultMessageStore(small_config(tmp_path))
    with store:
        store.put_message(Message(topic="T", body=b"x" * 1000, queue_id=0))
        first = str(tmp_path / "commitlog" / f"{0:020d}")
        assert "rr" in _vm_flags(first)
        while len(os.listdir(tmp_path / "commitlog")) < 2:
            store.put_message(Message(topic="T", body=b"x" * 1000, queue_id=0))
        second = str(tmp_path / "commitlog" / f"{64 * 1024:020d}")
        assert "rr" in _vm_flags(second)
        assert "rr" not in _vm_flags(first)


def _mappings(path: str) -> list[tuple[int, set[str]]]:
    """Each of this process's mappings of ``path`` in address order: its length and the kernel's flags
    (``hg``: advised huge, MADV_HUGEPAGE)."""
    found: list[tuple[int, set[str]]] = []
    length = -1
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start, _, end = head[0].partition("-")
            length = int(end, 16) - int(start, 16) if head[-1] == path else -1
        elif length >= 0 and line.startswith("VmFlags:"):
            found.append((length, set(head[1:])))
    return found


@pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps") or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="needs /proc to read a mapping's flags, and MADV_HUGEPAGE",
)
def test_an_index_files_hash_slots_are_advised_huge_while_it_is_written(tmp_path: Path) -> None:
    """Keys of topics sent to in turn hash anywhere in the slots: each send on a page of its own, a TLB
    miss and a write fault per page after each writeback. The writer advises the whole huge pages of
    slots huge; the entries after them, and a reader's mapping, stay as they were; the bytes are the
    same either way."""
    slots = (2 * HUGE_PAGE + HUGE_PAGE // 2) // HASH_SLOT_SIZE  # two whole huge pages of slots, and a half
    path = str(tmp_path / "20261130000000000")
    f = IndexFile(path, slots, 1000)
    assert f.put_keys(["T#a", "T#b"], 100, 1_700_000_000_000) == 2
    f.write_header()
    maps = _mappings(path)
    assert maps[0] == (2 * HUGE_PAGE, maps[0][1]) and "hg" in maps[0][1]
    assert all("hg" not in flags for _, flags in maps[1:]) and sum(n for n, _ in maps[1:]) > 0
    written = Path(path).read_bytes()
    f.close()
    reader = IndexFile(path, slots, 1000, read_only=True)
    try:
        assert all("hg" not in flags for _, flags in _mappings(path))
        assert bytes(reader.mm) == written
        out: list[int] = []
        reader.select_phy_offsets("T#b", 10, 0, 2**62, out)
        assert out == [100]
    finally:
        reader.close()
    small = str(tmp_path / "20261130000000001")
    g = IndexFile(small, 1000, 1000)  # slots short of one huge page: nothing advised
    try:
        assert all("hg" not in flags for _, flags in _mappings(small))
    finally:
        g.close()

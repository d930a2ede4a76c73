"""The CommitLog's one record iterator (``RecordWalk``): how recovery, dispatch and inspection see the end
of the data, a damaged body and a record still arriving."""

from __future__ import annotations

from pathlib import Path

from store import DefaultMessageStore, Message, StoreConfig
from store.commitlog import CommitLog, RecordWalk
from store.errors import CorruptRecordError
from store.inspect import commit_log, layout, verify

FILE = 8 * 1024


def write(root: Path, count: int) -> list[int]:
    """``count`` messages in 8 KiB files; returns their CommitLog offsets."""
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE)
    with DefaultMessageStore(cfg) as store:
        return [
            store.put_message(Message(topic="T", queue_id=0, body=b"b" * 300)).phys_offset
            for _ in range(count)
        ]


def test_a_walk_crosses_blank_fillers_and_stops_at_zeros(tmp_path: Path) -> None:
    offsets = write(tmp_path, 60)
    with commit_log(layout(tmp_path)) as cl:
        walk = RecordWalk(cl.files, 0, cl.max_offset)
        assert [info.commit_log_offset for info in walk] == offsets
        assert (walk.stop, walk.records, walk.corruption) == ("zeros", 60, None)
        assert walk.offset == walk.data_end == offsets[-1] + offsets[1] - offsets[0]


def test_recovery_ends_a_log_whose_last_file_ends_in_a_blank_filler_at_that_file_end(tmp_path: Path) -> None:
    write(tmp_path, 60)
    last = sorted((tmp_path / "commitlog").iterdir())[-1]
    last.unlink()  # the previous file, rolled with a blank filler, is now the last
    with commit_log(layout(tmp_path)) as cl:
        result = cl.scan(0, check_crc=True)
        assert result.corruption is None
        assert result.process_offset == cl.files.files[-1].end_offset  # as the writer left it: full


def test_a_damaged_body_stops_recovery_but_inspection_reports_it_and_goes_on(tmp_path: Path) -> None:
    offsets = write(tmp_path, 10)
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[offsets[3] + 300] ^= 0xFF  # inside the fourth record's body
    path.write_bytes(bytes(data))
    with commit_log(layout(tmp_path)) as cl:
        result = cl.scan(0, check_crc=True)
        assert (result.process_offset, result.records) == (offsets[3], 3)
        assert isinstance(result.corruption, CorruptRecordError)
        crc_errors: list[CorruptRecordError] = []
        walk = RecordWalk(cl.files, 0, cl.max_offset, check_crc=True, on_crc_error=crc_errors.append)
        assert len(list(walk)) == 10
        assert [e.offset for e in crc_errors] == [offsets[3]]
        assert walk.corruption is None
    report = verify(layout(tmp_path))
    assert (report.records, report.crc_errors, report.ok) == (10, 1, False)


def test_a_record_still_arriving_ends_a_dispatch_walk_quietly(tmp_path: Path) -> None:
    offsets = write(tmp_path, 3)
    cl = CommitLog(str(tmp_path / "commitlog"), FILE, max_message_size=4 << 20, read_only=True)
    cl.load()
    try:
        cl.files.files[0].wrote_position = offsets[2] + 100  # a slave got the first 100 bytes of the third
        walk = cl.walk(0, offsets[2] + offsets[1] - offsets[0])
        assert [info.commit_log_offset for info in walk] == offsets[:2]
        assert (walk.stop, walk.offset, walk.corruption) == ("partial", offsets[2], None)
    finally:
        cl.close()


def test_zeros_end_the_data_for_recovery_but_are_damage_inside_what_dispatch_was_told_is_written(
    tmp_path: Path,
) -> None:
    offsets = write(tmp_path, 3)
    end = offsets[2] + offsets[1] - offsets[0]
    with commit_log(layout(tmp_path)) as cl:  # loaded files count as full until recovery cuts them
        assert cl.scan(0, check_crc=True).process_offset == end
        walk = cl.walk(0, cl.max_offset)
        assert [info.commit_log_offset for info in walk] == offsets
        assert (walk.stop, walk.offset) == ("corrupt", end)
        assert walk.corruption is not None and "bad magic code 0x00000000" in walk.corruption.reason


def test_a_blank_magic_that_does_not_reach_the_file_end_is_damage_not_a_filler(tmp_path: Path) -> None:
    """The writer's filler is TOTALSIZE = the bytes left in the file
    (docs/store-format.md §end-of-file-filler): a record whose MAGICCODE reads as the filler's but whose size
    stops short must not make recovery, dispatch or a rebuild jump over the rest of its file's records without
    a word."""
    offsets = write(tmp_path, 60)
    victim = offsets[len(offsets) // 2]
    path = tmp_path / "commitlog" / f"{victim - victim % FILE:020d}"
    data = bytearray(path.read_bytes())
    data[victim % FILE + 4 : victim % FILE + 8] = (-875286124).to_bytes(4, "big", signed=True)
    path.write_bytes(bytes(data))
    with commit_log(layout(tmp_path)) as cl:
        result = cl.scan(0, check_crc=True)
        assert result.process_offset == victim and result.corruption is not None
        walk = RecordWalk(cl.files, 0, cl.max_offset)
        assert [info.commit_log_offset for info in walk] == [o for o in offsets if o < victim]
        assert (walk.stop, walk.offset) == ("corrupt", victim)


def test_verify_reports_a_zeroed_header_once_and_checks_every_record_after_it(tmp_path: Path) -> None:
    """Zeros inside a file's data are damage, not its end: verify names them (file and offset) once and
    goes on from the next record that names its own offset, so no intact record goes unchecked."""
    offsets = write(tmp_path, 60)
    victim = offsets[3]
    path = tmp_path / "commitlog" / f"{victim - victim % FILE:020d}"
    data = bytearray(path.read_bytes())
    data[victim % FILE : victim % FILE + 8] = bytes(8)
    path.write_bytes(bytes(data))
    report = verify(layout(tmp_path))
    assert report.records == 59  # all but the one whose header is gone
    assert (report.corrupt_files, report.crc_errors, report.records_without_unit) == (1, 0, 0)
    (damage,) = [p for p in report.problems if "zeroed record header" in p]
    assert f"{path}@{victim}:" in damage and f"next record starts at {offsets[4]}" in damage
    (unit,) = [p for p in report.problems if "consumequeue" in p]  # the one unit of the lost record
    assert f"no record starts at CommitLog offset {victim}" in unit
    assert report.problems_found == 2 and not report.ok

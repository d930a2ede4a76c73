"""One damaged record whose extent is still known costs only that record: recovery sets it aside (a
quarantine with a manifest, an ERROR, counted) and every later record stays in the CommitLog and in
service, over the wire, by pull and by msgId."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from daemon.broker.headers import QueryMessageRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message
from store.record import decode_records
from tests.daemons import handle, local_cluster

FILE_SIZE = 280 * 1024
SIZES = {
    "mapped_file_size_commit_log": FILE_SIZE,
    "mapped_file_size_consume_queue": 6000,
    "max_hash_slot_num": 5000,
    "max_index_num": 20000,
}
QUEUES = 4
COUNT = 3000


def five_file_store(root: Path) -> list[tuple[int, int, int]]:
    """3,000 messages in 4 queues over 5 CommitLog files, stopped cleanly: ``(offset, size, body start)``
    of each record, in order."""
    out = []
    with DefaultMessageStore(StoreConfig(store_path_root_dir=str(root), **SIZES)) as s:
        for i in range(COUNT):
            body = f"m{i:05d}-".encode() * 40
            props = {"TAGS": "t", "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"}
            put = s.put_message(Message("Kept", body, queue_id=i % QUEUES, properties=props))
            assert put.ok
            raw = s.commit_log.read_record(put.phys_offset)
            assert raw is not None
            out.append((put.phys_offset, put.wrote_bytes, bytes(raw).index(body)))
    assert len(list((root / "commitlog").iterdir())) == 5
    return out


def flip(path: Path, pos: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ mask]))


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_a_body_flip_in_the_second_to_last_file_costs_one_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, stop: str
) -> None:
    """Clean: normal recovery checks the last three files. Crash: no checkpoint left, so abnormal recovery
    re-dispatches the whole CommitLog (ConsumeQueue units and index entries past the damage too)."""
    root = tmp_path / "broker"
    recs = five_file_store(root)
    fourth = 3 * FILE_SIZE
    in_fourth = [i for i, r in enumerate(recs) if fourth <= r[0] < fourth + FILE_SIZE]
    victim = in_fourth[3]
    v_off, v_size, v_body = recs[victim]
    assert COUNT - victim - 1 > 1000  # over a thousand intact records follow it
    flip(root / "commitlog" / f"{fourth:020d}", v_off - fourth + v_body + 5)
    if stop == "crash":
        (root / "abort").touch()
        (root / "checkpoint").write_bytes(bytes(4096))

    with caplog.at_level(logging.ERROR), local_cluster(tmp_path, store_path_root_dir=str(root), **SIZES) as c:
        h = handle(c)
        served: set[int] = set()
        for qid in range(QUEUES):
            offset = 0
            while True:
                pulled = c.loop.run(h.pull("G", "Kept", qid, offset))
                if pulled.code != ResponseCode.SUCCESS:
                    assert pulled.code == ResponseCode.PULL_NOT_FOUND, (pulled.code, pulled.remark)
                    break
                served.update(m.commit_log_offset for m in decode_records(pulled.body))
                offset = int(pulled.ext_fields["nextBeginOffset"])
        assert served == {r[0] for i, r in enumerate(recs) if i != victim}  # 2,999 of 3,000

        looked_up = failed = 0
        for i in range(victim + 1, COUNT, max(1, (COUNT - victim) // 300)):
            answer = c.loop.run(h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(recs[i][0])}))
            looked_up += 1
            failed += answer.code != ResponseCode.SUCCESS
        assert (looked_up, failed) == (looked_up, 0) and looked_up >= 290
        begin = int(time.time() * 1000) - 3_600_000
        for i in (victim - 1, victim + 1, COUNT // 2, COUNT - 1):
            ext = QueryMessageRequestHeader("Kept", f"k{i}", 64, begin, 2**62).to_ext_fields()
            answer = c.loop.run(h.call(RequestCode.QUERY_MESSAGE, ext))
            assert answer.code == ResponseCode.SUCCESS, (i, answer.remark)
            assert [m.commit_log_offset for m in decode_records(answer.body)] == [recs[i][0]]
        damaged = c.loop.run(h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(v_off)}))
        assert damaged.code != ResponseCode.SUCCESS  # never served as good
        c.loop.run(h.client.close())

    # set aside: that record only, copied into a quarantine with its manifest, counted, logged at ERROR
    [qdir] = list((root / "quarantine").iterdir())
    manifest = json.loads((qdir / "manifest.json").read_text())
    assert (manifest["records"], manifest["damaged"], manifest["units"]) == (0, 1, 0)
    [piece] = manifest["files"]
    assert (piece["from_offset"], piece["to_offset"], piece["whole_file"]) == (v_off, v_off + v_size, False)
    assert (qdir / piece["file"]).stat().st_size == v_size
    assert (root / "commitlog" / f"{4 * FILE_SIZE:020d}").exists()  # the last file was left in place
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("set aside 1 damaged record" in e and str(v_off) in e for e in errors), errors

"""Lookups that land on a damaged record: VIEW_MESSAGE_BY_ID (``msg query --id``), the IndexFile's key and
unique-key queries, ``msg trace``, and the offline ``store msg query`` on the same store. The broker sets
the record aside as a pull's read does (a quarantine, ``recovery: read``, an ERROR), answers 4.9.8's code
with what it found, and the CLI says so in one line and exits 10; before, the lookup said "not found" (or
nothing: the index hit was dropped at WARNING) and nothing was set aside."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.broker.headers import DAMAGED_FIELD, ViewMessageRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from mqctl.admin.client import Admin
from mqctl.tracedata import TraceRecord, encode_trace, trace_keys
from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message
from store.quarantine import list_quarantines
from store.record import create_msg_id
from store.results import QueryResult, SelectedMessage
from tests.cli.test_check import plugin
from tests.daemons import LocalCluster, handle, local_cluster
from tests.support.cli import RunCli
from tests.support.tracing import send_trace_body

FILE = 64 * 1024
VICTIM = 3  # the damaged message; it shares the key pair1 with message 2


def uniq(i: int) -> str:
    return f"AB{i:030d}"


@dataclass
class Damaged:
    root: Path
    offsets: list[int]
    path: Path  # the CommitLog file holding the damaged record


def damage_an_old_record(tmp_path: Path) -> Damaged:
    """1,500 messages over several 64 KiB files, a clean stop, one body byte of the fourth flipped in the
    first file: a normal start re-checks only the last files, so no recovery finds it."""
    root = tmp_path / "broker"
    store = DefaultMessageStore(
        StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=FILE,
            mapped_file_size_consume_queue=20 * 10_000,
            max_hash_slot_num=1000,
            max_index_num=4000,
        )
    )
    store.open()
    store.start()
    offsets = [
        store.put_message(
            Message(
                topic="T",
                body=f"message-{i}-".encode() * 12,
                properties={"TAGS": "x", "KEYS": f"k{i} pair{i // 2}", "UNIQ_KEY": uniq(i)},
            )
        ).phys_offset
        for i in range(1500)
    ]
    store.shutdown()
    assert len(os.listdir(root / "commitlog")) >= 5
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[offsets[VICTIM] + 88 + 7] ^= 0x20
    path.write_bytes(bytes(data))
    return Damaged(root, offsets, path)


@pytest.fixture
def damaged(tmp_path: Path) -> Damaged:
    return damage_an_old_record(tmp_path)


@pytest.fixture
def cluster(tmp_path: Path, damaged: Damaged) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path, mapped_file_size_commit_log=FILE) as c:
        yield c


def msg_id(c: LocalCluster, offset: int) -> str:
    host, port = c.broker_addr.split(":")
    return create_msg_id((host, int(port)), offset)


def read_quarantines(root: Path) -> list[tuple[str, list[int]]]:
    return [(m.recovery, [p.from_offset for p in m.files]) for m in list_quarantines(str(root))]


def one_error_line(stderr: str) -> str:
    [line] = [s for s in stderr.splitlines() if s.startswith("mqctl: error:")]
    return line


def test_a_lookup_by_msg_id_sets_the_damaged_record_aside_and_exits_10(
    cli: RunCli, damaged: Damaged, cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """``msg query --id`` said 'no message' (exit 3) and nothing was set aside: now the broker puts the
    record in a quarantine at once (an ERROR, as a pull does), answers SYSTEM_ERROR (4.9.8's code for no
    message there) naming the damage, and the CLI exits 10 (StoreError) with one line; the next lookup
    finds it set aside, with no second quarantine, and check cluster warns."""
    victim = damaged.offsets[VICTIM]
    ns = cluster.namesrv_addr
    assert not read_quarantines(damaged.root)
    with caplog.at_level(logging.ERROR):
        result = cli("msg", "query", "--id", msg_id(cluster, victim), "-n", ns, "-o", "json")
    assert result.code == 10, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert f"is damaged in the broker's store: can not find message by the offset, {victim}" in line, line
    assert "body CRC" in line and "in a quarantine" in line, line
    assert read_quarantines(damaged.root) == [("read", [victim])]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert sum("a read set aside 1 damaged record" in e and str(victim) in e for e in errors) == 1, errors

    h = handle(cluster)
    request = RemotingCommand.request(
        RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(victim).to_ext_fields()
    )
    answer = cluster.loop.run(h.client.invoke(cluster.broker_addr, request, 5))
    cluster.loop.run(h.client.close())
    assert (answer.code, answer.ext_fields.get(DAMAGED_FIELD)) == (ResponseCode.SYSTEM_ERROR, str(victim))
    assert "set aside earlier" in (answer.remark or "")

    again = cli("msg", "query", "--id", msg_id(cluster, victim), "-n", ns)
    assert again.code == 10 and "is damaged" in one_error_line(again.stderr)
    assert read_quarantines(damaged.root) == [("read", [victim])]
    after = cli("msg", "query", "--id", msg_id(cluster, damaged.offsets[VICTIM + 1]), "-n", ns, "-o", "json")
    assert after.code == 0 and json.loads(after.stdout)["body"] == "message-4-" * 12
    warning = plugin(cli("check", "cluster", "-n", ns), "WARNING")
    assert "holds 1 quarantine with" in warning


def test_a_msg_id_inside_a_record_is_not_found_and_sets_nothing_aside(
    cli: RunCli, damaged: Damaged, cluster: LocalCluster
) -> None:
    """An offset that is no record's start (a mistyped id) is 'not found' as before, not damage."""
    inside = damaged.offsets[VICTIM + 1] + 40
    result = cli("msg", "query", "--id", msg_id(cluster, inside), "-n", cluster.namesrv_addr)
    assert result.code == 3, result.stderr
    assert not read_quarantines(damaged.root)


def test_key_and_unique_key_lookups_through_the_index_name_the_damaged_record(
    cli: RunCli, damaged: Damaged, cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The index hit of the damaged record was dropped at WARNING and the lookup said 'no message' (exit
    3): now it is set aside, a key whose only hit is damaged exits 10 naming the broker and offset, and a
    key with an intact message too prints that one (exit 0) and warns of the other."""
    victim = damaged.offsets[VICTIM]
    ns = cluster.namesrv_addr
    for args in (
        ("-t", "T", "-k", f"k{VICTIM}"),
        ("-t", "T", "--unique-key", uniq(VICTIM)),
        ("--id", uniq(VICTIM)),
    ):
        result = cli("msg", "query", *args, "-n", ns, "-o", "json")
        assert result.code == 10, (args, result.stdout, result.stderr)
        line = one_error_line(result.stderr)
        assert "no intact message" in line and f"{cluster.broker_addr} at CommitLog offset {victim}" in line
    assert read_quarantines(damaged.root) == [("read", [victim])]

    with caplog.at_level(logging.WARNING):
        result = cli("msg", "query", "-t", "T", "-k", f"pair{VICTIM // 2}", "-n", ns, "-o", "json")
    assert result.code == 0, result.stderr
    assert [row["body"] for row in json.loads(result.stdout)] == ["message-2-" * 12]
    warnings = [r.getMessage() for r in caplog.records if r.name == "mqctl.admin.messaging"]
    assert any(f"damaged record at CommitLog offset {victim}" in w for w in warnings), warnings


def test_the_offline_store_lookups_say_the_record_is_damaged(cli: RunCli, damaged: Damaged) -> None:
    """``store msg query --id`` said 'no message' with the record's offset as 0; now the offset and file
    and exit 10, as ``-k`` whose only hit is the damaged record."""
    victim = damaged.offsets[VICTIM]
    root = str(damaged.root)
    by_id = cli("store", "msg", "query", "--store", root, "--id", create_msg_id(("127.0.0.1", 10911), victim))
    assert by_id.code == 10, by_id.stderr
    line = one_error_line(by_id.stderr)
    assert f"is damaged in this store: corrupt record at {damaged.path}@{victim}: body CRC" in line, line
    by_key = cli("store", "msg", "query", "--store", root, "-t", "T", "-k", f"k{VICTIM}")
    assert by_key.code == 10, by_key.stderr
    assert f"damaged record, at CommitLog offset {victim}" in one_error_line(by_key.stderr)
    inside = cli(
        "store", "msg", "query", "--store", root, "--id", create_msg_id(("127.0.0.1", 10911), victim + 40)
    )
    assert inside.code == 3, inside.stderr


def test_a_trace_whose_stored_message_is_damaged_shows_the_traces_and_sets_it_aside(
    cli: RunCli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``msg trace`` reads the stored message for its store event: a damaged one gave no store event and
    no word, nothing set aside; now it is set aside, the trace says what the records say (exit 0) and a
    warning names the damage."""
    damaged = damage_an_old_record(tmp_path)
    victim = damaged.offsets[VICTIM]
    with local_cluster(tmp_path, mapped_file_size_commit_log=FILE, trace_topic_enable=True) as c:
        pub = TraceRecord(
            "Pub",
            uniq(VICTIM),
            timestamp_ms=1,
            region_id="DefaultRegion",
            group="PG",
            topic="T",
            keys=f"k{VICTIM}",
            store_host=c.broker_addr,
            body_size=1,
            cost_ms=1,
            msg_type="Normal_Msg",
            msg_id=msg_id(c, victim),
            success=True,
        )

        async def send() -> None:
            async with Admin([c.namesrv_addr]) as admin:
                await send_trace_body(admin, encode_trace([pub]), trace_keys([pub]))

        c.loop.run(send())
        with caplog.at_level(logging.WARNING):
            result = cli("msg", "trace", uniq(VICTIM), "-n", c.namesrv_addr, "-o", "json")
    assert result.code == 0, result.stderr
    assert [e["event"] for e in json.loads(result.stdout)["events"]] == ["produce"]
    assert read_quarantines(damaged.root) == [("read", [victim])]
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("mqctl.")]
    assert any("damaged" in w and str(victim) in w for w in warnings), warnings
    [quarantine] = list_quarantines(str(damaged.root))
    verified = cli(
        "store", "verify", "--store", str(damaged.root), "-o", "json"
    )  # the stopped broker's store
    assert verified.code == 0, verified.stderr
    assert json.loads(verified.stdout)["notes"] == [
        f"damaged record at CommitLog offset {victim} set aside in quarantine {quarantine.path} (by recovery "
        "or a read); kept in place, never served"
    ]


@pytest.mark.pure_python
def test_a_broker_that_serves_the_damaged_record_as_stored_is_read_as_damage(
    cli: RunCli, damaged: Damaged, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RocketMQ broker answers VIEW_MESSAGE_BY_ID and QUERY_MESSAGE with the record as stored, damaged or
    not (here ours, made to look records up without checking them): the CLI's own CRC check finds it
    (the query decoded its answer whole and failed on it), says so, and exits 10."""
    victim = damaged.offsets[VICTIM]
    store = cluster.broker.store

    def as_stored(offset: int) -> SelectedMessage | None:
        raw = store.commit_log.read_record(offset)
        return None if raw is None else SelectedMessage(offset, len(raw), raw)

    def query_as_stored(topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        hits = sorted(set(store.index.query(f"{topic}#{key}", max_num, begin_ms, end_ms)))
        return QueryResult([found for offset in hits if (found := as_stored(offset)) is not None], 0, 0)

    monkeypatch.setattr(store, "look_message_by_offset", as_stored)
    monkeypatch.setattr(store, "query_message", query_as_stored)
    ns = cluster.namesrv_addr
    by_id = cli("msg", "query", "--id", msg_id(cluster, victim), "-n", ns)
    assert by_id.code == 10, by_id.stderr
    assert "the broker answered it damaged (body CRC" in one_error_line(by_id.stderr)
    by_key = cli("msg", "query", "-t", "T", "-k", f"k{VICTIM}", "-n", ns)
    assert by_key.code == 10, by_key.stderr
    assert f"{cluster.broker_addr} at CommitLog offset {victim}" in one_error_line(by_key.stderr)
    pair = cli("msg", "query", "-t", "T", "-k", f"pair{VICTIM // 2}", "-n", ns, "-o", "json")
    assert pair.code == 0, pair.stderr
    assert [row["body"] for row in json.loads(pair.stdout)] == ["message-2-" * 12]

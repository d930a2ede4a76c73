"""Pure pieces of the broker: tag expressions, batch bodies, send headers, topic names, config loading."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from daemon.broker.config import BrokerConfig
from daemon.broker.filter import build_subscription, tag_codes
from daemon.broker.headers import (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from daemon.broker.long_poll import PullRequestHoldService
from daemon.broker.managers import topics
from daemon.broker.managers.topics import topic_problem
from daemon.broker.processors.send import decode_batch, parse_send, stored_fields
from daemon.config import ConfigError, load_config
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import HeaderFieldError, RemotingCommandError
from store.javahash import java_hash
from tests.support.broker import batch_entry


def test_tag_expressions_parse_like_java() -> None:
    assert tag_codes(build_subscription("T", "*")) is None
    assert tag_codes(build_subscription("T", "")) is None
    sub = build_subscription("T", " TagA || TagB ||  ")
    assert sub.tags_set == ["TagA", "TagB"] and sub.code_set == [java_hash("TagA"), java_hash("TagB")]
    assert tag_codes(sub) == {java_hash("TagA"), java_hash("TagB")}


def test_a_v2_send_header_reads_as_its_v1_header_field_for_field() -> None:
    """`parse_send` reads the one-letter fields straight into the V1 header; `l` and `m` are the two whose
    order differs between the classes, so they get values that a swap would expose."""
    v1 = SendMessageRequestHeader(
        "G", "T", "TBW102", 4, 3, 2, 1795252748748, 7, "TAGS\x01a", 5, True, True, 16
    )
    v2 = SendMessageRequestHeaderV2(
        "G", "T", "TBW102", 4, 3, 2, 1795252748748, 7, "TAGS\x01a", 5, True, 16, True
    )
    assert parse_send(RequestCode.SEND_MESSAGE_V2, v2.to_ext_fields()) == v1
    assert parse_send(RequestCode.SEND_BATCH_MESSAGE, v2.to_ext_fields()) == v1
    sparse = SendMessageRequestHeaderV2("G", "T", "TBW102", 4, 0, 0, 1, 0, m=True).to_ext_fields()
    assert parse_send(RequestCode.SEND_MESSAGE_V2, sparse).max_reconsume_times is None
    with pytest.raises(HeaderFieldError, match=r"SendMessageRequestHeaderV2.*'e'"):
        parse_send(RequestCode.SEND_MESSAGE_V2, {**sparse, "e": "x"})


def test_a_v1_send_header_reads_as_the_header_class_parses_it() -> None:
    """SEND_MESSAGE (the C++ client's code) names its fields; `parse_send` reads them as the class does."""
    v1 = SendMessageRequestHeader(
        "G", "T", "TBW102", 4, 3, 2, 1795252748748, 7, "TAGS\x01a", 5, True, True, 16
    )
    ext = v1.to_ext_fields()
    assert parse_send(RequestCode.SEND_MESSAGE, ext) == SendMessageRequestHeader.from_ext_fields(ext) == v1
    with pytest.raises(HeaderFieldError, match=r"SendMessageRequestHeader\b.*'queueId'"):
        parse_send(RequestCode.SEND_MESSAGE, {**ext, "queueId": "x"})


def test_a_stored_send_is_answered_with_the_response_headers_fields() -> None:
    header = SendMessageResponseHeader("C0A8000100002A9F0000000000000064", 3, 12345678901)
    stored = stored_fields("C0A8000100002A9F0000000000000064", 3, 12345678901)
    assert list(stored.items()) == list(header.to_ext_fields().items())  # the same keys in the same order


def test_topic_names_are_checked_as_java_matches_them() -> None:
    assert topic_problem("Topic_a-1|%") is None
    assert topic_problem("a" * 127) is None
    assert topic_problem("a" * 128) == "The specified topic is longer than topic max length."
    assert topic_problem("") == "The specified topic is blank."
    for bad in ("T\n", "T x", "T/1", "\u00e9t\u00e9", "b" * 200 + "!"):  # a regex search with $ took "T\n"
        assert "illegal characters" in (topic_problem(bad) or ""), bad


def test_the_topic_name_cache_stays_bounded() -> None:
    """Names come from clients: the cache keeps only valid ones, and never more than its cap."""
    for bad in ("x" * 100_000 + "!", "T\n", "a" * 128):
        assert topic_problem(bad) is not None and bad not in topics._valid
    for i in range(topics._VALID_MAX + 10):
        assert topic_problem(f"T{i}") is None
    assert 0 < len(topics._valid) <= topics._VALID_MAX


@given(
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=64), st.text("abc", min_size=1, max_size=5)),
        max_size=5,
    )
)
def test_batch_bodies_round_trip(items: list[tuple[int, bytes, str]]) -> None:
    payload = b"".join(batch_entry(body, {"KEYS": key}, flag) for flag, body, key in items)
    assert decode_batch(payload) == [(flag, body, {"KEYS": key}) for flag, body, key in items]


def test_truncated_batch_is_refused() -> None:
    whole = batch_entry(b"body", {"KEYS": "k"})
    for cut in (3, 10, len(whole) - 1):
        with pytest.raises(RemotingCommandError):
            decode_batch(whole[:cut])


def test_rocketmq_broker_conf_reaches_the_store(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=C1\nbrokerName=b1\nbrokerIP1=10.1.2.3\nlistenPort=20911\nnamesrvAddr=a:9876;b:9876\n"
        "storePathRootDir=/data/store\nflushDiskType=SYNC_FLUSH\nfileReservedTime=48\ndeleteWhen=01\n"
        "mappedFileSizeCommitLog=104857600\nmapedFileSizeCommitLog=1\nautoCreateTopicEnable=false\n"
    )
    cfg = load_config(BrokerConfig, conf, environ={})
    assert cfg.broker_addr == "10.1.2.3:20911" and cfg.namesrv_addrs == ["a:9876", "b:9876"]
    assert cfg.auto_create_topic_enable is False
    store = cfg.store_config()
    assert (
        store.store_path_root_dir,
        store.flush_disk_type,
        store.file_reserved_time,
        store.delete_when,
    ) == ("/data/store", "SYNC_FLUSH", 48, "01")
    assert store.mapped_file_size_commit_log == 104857600  # the old `maped` spelling is ignored, as in 4.9.8


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("brokerRole=slave", "brokerRole is ASYNC_MASTER, SYNC_MASTER or SLAVE, not 'slave'"),
        ("brokerRole=SYNC_MASTERR", "not 'SYNC_MASTERR'"),
        ("flushDiskType=sync_flush", "flushDiskType is ASYNC_FLUSH or SYNC_FLUSH, not 'sync_flush'"),
        ("deleteWhen=4am", "deleteWhen is hours of the day (0-23) separated by ';'"),
        ("deleteWhen=04;24", "not '04;24'"),
    ],
)
def test_a_misspelt_role_flush_type_or_delete_hour_refuses_the_start(
    tmp_path: Path, line: str, said: str
) -> None:
    """4.9.8's valueOf refuses a brokerRole or flushDiskType it does not name; ours ran on: 'slave' as a
    master beside its real one, 'SYNC_MASTERR' as an ASYNC_MASTER. A deleteWhen that is no list of hours
    never came due (4.9.8 throws at each cleanup)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"{line}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(BrokerConfig, conf, environ={})
    assert said in str(caught.value), caught.value
    conf.write_text("brokerRole=SLAVE\nbrokerId=1\nflushDiskType=SYNC_FLUSH\ndeleteWhen=00;4; 23;\n")
    assert load_config(BrokerConfig, conf, environ={}).broker_role == "SLAVE"


async def test_an_arrival_on_another_thread_wakes_parked_pulls_and_wakers_on_the_loop() -> None:
    """A put that waits for an fsync runs in the flush pool: its arrival hops to the loop."""
    hold = PullRequestHoldService(lambda _topic, _queue_id: 0, check_interval=3600)
    hold.start()
    woken_on: list[int] = []
    hold.wakers.append(lambda: woken_on.append(threading.get_ident()))
    parked = hold.park("T", 0, 5, 60)
    await asyncio.to_thread(hold.on_arrival, "T", 0, 5)  # not past the parked offset
    await asyncio.sleep(0)
    assert not parked.done() and woken_on == [threading.get_ident()]
    await asyncio.to_thread(hold.on_arrival, "T", 0, 6)
    await asyncio.wait_for(parked, 5)
    assert woken_on == [threading.get_ident()] * 2  # on the loop's thread, not the putting one
    hold.on_arrival("T", 1, 9)  # on the loop: inline
    assert len(woken_on) == 3
    await hold.stop()

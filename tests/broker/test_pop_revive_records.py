"""The revive records a DLedger leader logs for POP (5.x's ``AckMsg`` and ``PopCheckPoint``): what a
member taking over reads back, and what it refuses to read."""

from __future__ import annotations

import json

import pytest

from daemon.broker.pop import ACK_TAG, BATCH_ACK_TAG, CK_TAG, Copied, InFlight, ack_body, ck_body, read_record

LENT = InFlight("G", "%RETRY%G", 1, 17, 4096, 1_700_000_000_000, 60_000, 3, True, 15, "attempt-1")


def test_an_ack_record_is_5x_ackmsg_and_reads_back_as_its_queue_offset() -> None:
    body = ack_body(LENT, "broker-a")
    assert json.loads(body) == {
        "ao": 17,
        "so": 15,
        "c": "G",
        "t": "%RETRY%G",
        "q": 1,
        "pt": 1_700_000_000_000,
        "bn": "broker-a",
    }
    assert read_record(ACK_TAG, body) == (ACK_TAG, ("G", "%RETRY%G", 1), [17], [], None)


def test_a_checkpoint_record_reads_back_as_the_same_lending() -> None:
    body = ck_body(LENT, "broker-a")
    fields = json.loads(body)
    assert fields["so"] + fields["d"][0] == 17 and fields["n"] == 1  # 5.x's reading of a checkpoint
    assert (fields["pt"], fields["it"], fields["rp"]) == (1_700_000_000_000, 60_000, 2)
    assert read_record(CK_TAG, body) == (CK_TAG, ("G", "%RETRY%G", 1), [17], [LENT], None)


def test_a_5x_batch_ack_names_each_of_its_offsets() -> None:
    body = json.dumps({"aol": [3, 5], "so": 3, "c": "G", "t": "T", "q": 0, "pt": 1, "bn": "b"}).encode()
    assert read_record(BATCH_ACK_TAG, body) == (BATCH_ACK_TAG, ("G", "T", 0), [3, 5], [], None)


def test_a_checkpoint_of_a_fifo_pop_names_each_lending_of_it() -> None:
    """One record for the lendings of one pop of one queue: 5.x's ``n`` and ``d``, each message's CommitLog
    offset and attempt in the same order."""
    second = InFlight("G", "%RETRY%G", 1, 20, 8192, 1_700_000_000_000, 60_000, 1, True, 15, "attempt-1")
    body = ck_body(LENT, "broker-a", [LENT, second])
    fields = json.loads(body)
    assert (fields["n"], fields["so"], fields["d"]) == (2, 15, [2, 5])
    assert read_record(CK_TAG, body) == (CK_TAG, ("G", "%RETRY%G", 1), [17, 20], [LENT, second], None)


def test_an_end_logged_before_a_copy_names_the_copy_and_the_message() -> None:
    body = ack_body(LENT, "broker-a", copy_to="%DLQ%G")
    fields = json.loads(body)
    assert (fields["ao"], fields["to"], fields["co"]) == (17, "%DLQ%G", 4096)
    assert read_record(ACK_TAG, body) == (ACK_TAG, ("G", "%RETRY%G", 1), [17], [], Copied("%DLQ%G", 4096))


@pytest.mark.parametrize(
    ("tag", "body"),
    [
        (ACK_TAG, b"not json"),
        (ACK_TAG, b"[1, 2]"),
        (ACK_TAG, b'{"c": "G", "t": "T", "q": 0}'),  # no offset
        (CK_TAG, b'{"so": 1, "d": [], "c": "G", "t": "T", "q": 0}'),  # no diff
        (CK_TAG, json.dumps({**json.loads(ck_body(LENT, "b")), "co": "x"}).encode()),
        (CK_TAG, json.dumps({**json.loads(ck_body(LENT, "b", [LENT, LENT])), "a": [1]}).encode()),
        (None, ack_body(LENT, "b")),  # no tag
        ("other", ack_body(LENT, "b")),
    ],
)
def test_anything_else_reads_as_nothing(tag: str | None, body: bytes) -> None:
    assert read_record(tag, body) is None

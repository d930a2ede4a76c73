"""The checker on hand-made histories: each anomaly it knows, found where it is and only there."""

from __future__ import annotations

import random

from tests.jepsen.checker import Read, check, check_leaders, check_places, check_resumed, check_served
from tests.jepsen.history import History, OpType
from tests.jepsen.logs import Logged, check_terms


def sent(h: History, process: str, value: str, outcome: OpType, queue: int = 0, offset: int = 0) -> None:
    h.complete(h.invoke(process, "send", value), outcome, queue=queue, offset=offset)


def test_a_clean_run_is_valid() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    sent(h, "p0", "b", "ok", 0, 1)
    sent(h, "p1", "c", "ok", 1, 0)
    sent(h, "p1", "d", "fail")
    result = check(h, [Read(0, 0, "a"), Read(0, 1, "b"), Read(1, 0, "c")])
    assert result.valid, result.summary()
    assert result.counts == {"messages": 4, "attempts": 4, "ok": 3, "info": 0, "fail": 1, "read": 3}


def test_an_acknowledged_message_not_read_is_lost() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    sent(h, "p0", "b", "ok", 0, 1)
    result = check(h, [Read(0, 0, "a")])
    assert [(a.kind, a.value) for a in result.anomalies] == [("lost", "b")]


def test_an_unknown_outcome_may_be_absent_or_present_once() -> None:
    h = History()
    sent(h, "p0", "a", "info")
    sent(h, "p0", "b", "info")
    assert check(h, [Read(0, 0, "a")]).valid


def test_one_attempt_read_twice_is_duplicated() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    result = check(h, [Read(0, 0, "a"), Read(0, 1, "a")])
    assert result.kinds() == {"duplicated"}


def test_copies_that_retries_explain_are_listed_apart_not_anomalies() -> None:
    h = History()
    sent(h, "p0", "a", "info")  # FLUSH_SLAVE_TIMEOUT: stored, then sent again
    sent(h, "p0", "a", "ok", 0, 1)
    result = check(h, [Read(0, 0, "a"), Read(0, 1, "a")])
    assert result.valid and result.retried_duplicates == ["a"]
    result = check(h, [Read(0, 0, "a"), Read(0, 1, "a"), Read(0, 2, "a")])  # three for two attempts
    assert result.kinds() == {"duplicated"}


def test_a_failed_send_that_is_read_back_is_failed_visible() -> None:
    h = History()
    sent(h, "p0", "a", "fail")
    assert check(h, [Read(0, 0, "a")]).kinds() == {"failed-visible"}


def test_a_message_never_sent_is_foreign() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    result = check(h, [Read(0, 0, "a"), Read(0, 1, "zz")])
    assert [(a.kind, a.value) for a in result.anomalies] == [("foreign", "zz")]


def test_an_acknowledged_place_that_holds_something_else_is_moved() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 2, 7)
    assert check(h, [Read(2, 8, "a")]).kinds() == {"moved"}


def test_an_acknowledged_offset_without_its_queue_is_found_in_any_queue() -> None:
    """The C++ client reports the offset of a send but not its queue (a retry goes to the next queue): the
    copy at that offset places it, for the moved and the reordered rules alike."""
    h = History()
    h.complete(h.invoke("cpp0", "send", "a"), "ok", offset=5)
    h.complete(h.invoke("cpp0", "send", "b"), "ok", offset=6)
    assert check(h, [Read(3, 5, "a"), Read(3, 6, "b")]).valid
    assert check(h, [Read(3, 4, "a"), Read(3, 6, "b")]).kinds() == {"moved"}
    result = check(h, [Read(1, 6, "a"), Read(1, 5, "b")])  # each at the other's offset, b first
    assert result.kinds() == {"moved"}
    h2 = History()
    h2.complete(h2.invoke("cpp0", "send", "a"), "ok", offset=5)
    h2.complete(h2.invoke("cpp0", "send", "b"), "ok", offset=2)
    assert check(h2, [Read(1, 5, "a"), Read(1, 2, "b")]).kinds() == {"reordered"}


def test_one_producers_acknowledged_messages_read_out_of_order_are_reordered() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    sent(h, "p1", "x", "ok", 0, 1)
    sent(h, "p0", "b", "ok", 0, 2)
    # the client saw a@0 then b@2, the group serves b before a: both moved, and b before a
    result = check(h, [Read(0, 0, "b"), Read(0, 1, "x"), Read(0, 2, "a")])
    assert [a.value for a in result.of("reordered")] == ["b"]
    # two producers interleaved in one queue is not a reordering
    assert check(h, [Read(0, 0, "a"), Read(0, 1, "x"), Read(0, 2, "b")]).valid


def test_two_operations_in_flight_on_one_process_are_malformed() -> None:
    h = History()
    h.invoke("p0", "send", "a")
    h.invoke("p0", "send", "b")
    assert check(h, []).kinds() == {"malformed"}


def test_two_leaders_in_one_term() -> None:
    h = History()
    h.observe("n0", "LEADER", 1)
    h.observe("n1", "FOLLOWER", 1)
    h.observe("n1", "LEADER", 2)
    h.observe("n0", "LEADER", 1)  # the same claim seen twice is still one leader
    assert check_leaders(h).valid
    h.observe("n2", "LEADER", 2)
    result = check_leaders(h)
    assert [(a.kind, a.value) for a in result.anomalies] == [("two-leaders", "2")]


def test_writes_resumed_needs_an_acknowledgement_after_the_fault() -> None:
    h = History()
    sent(h, "p0", "a", "ok", 0, 0)
    heal = h.nemesis("heal", "master")
    sent(h, "p0", "b", "fail")
    assert check_resumed(h, heal.time).kinds() == {"not-resumed"}
    sent(h, "p0", "c", "ok", 0, 1)
    assert check_resumed(h, heal.time).valid


def test_writes_resumed_needs_a_send_invoked_after_the_fault() -> None:
    """An acknowledgement that raced the fault (the send went out before it) is no sign of recovery."""
    h = History()
    before = h.invoke("p0", "send", "a")
    pause = h.nemesis("pause", "n0")
    h.complete(before, "ok", queue=0, offset=0)
    assert check_resumed(h, pause.time).kinds() == {"not-resumed"}
    sent(h, "p0", "b", "ok", 0, 1)
    assert check_resumed(h, pause.time).valid


def test_a_clients_own_retries_explain_copies_of_one_operation() -> None:
    h = History()
    h.complete(h.invoke("ons0", "send", "a", tries=4), "ok", queue=0, offset=2)  # ali-ons retried inside
    result = check(h, [Read(0, 0, "a"), Read(0, 2, "a")])
    assert result.valid and result.retried_duplicates == ["a"]
    h = History()
    h.complete(h.invoke("p0", "send", "a"), "ok", queue=0, offset=2)
    assert check(h, [Read(0, 0, "a"), Read(0, 2, "a")]).kinds() == {"duplicated"}


def test_only_operations_invoked_after_a_fault_surely_met_it() -> None:
    h = History()
    before = h.invoke("p0", "send", "a")
    cut = h.nemesis("partition", "ha")
    late = h.complete(before, "ok", queue=0, offset=0)  # in flight across the cut: may have been acked
    after = h.complete(h.invoke("p0", "send", "b"), "info")
    assert not h.invoked_after(late, cut)
    assert h.invoked_after(after, cut)


def test_a_served_message_must_stay_where_it_was_served() -> None:
    final = [Read(0, 0, "a"), Read(0, 1, "b")]
    assert check_served([Read(0, 0, "a"), Read(0, 0, "a"), Read(0, 1, "b")], final).valid
    result = check_served([Read(0, 1, "x"), Read(0, 2, "c")], final)
    assert sorted((a.kind, a.value) for a in result.anomalies) == [
        ("served-changed", "x"),
        ("served-gone", "c"),
    ]


def test_a_queue_serving_two_messages_at_one_offset_or_skipping_one() -> None:
    assert check_places([Read(0, 0, "a"), Read(0, 1, "b"), Read(1, 3, "c")]).valid
    result = check_places([Read(0, 0, "a"), Read(0, 0, "b"), Read(0, 2, "c")])
    assert sorted(a.kind for a in result.anomalies) == ["place-skipped", "place-twice"]


#: Mostly acknowledged, some unknown, some refused.
OUTCOMES: tuple[OpType, ...] = ("ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "info", "fail")


def _clean_run(rng: random.Random) -> tuple[History, list[Read]]:
    """Three producers sending into four queues, some sends unknown (stored or not) and some failed,
    and the read the group would give: every SEND_OK at its place, in order."""
    h = History()
    ends = [0] * 4
    reads: list[Read] = []
    for n in range(300):
        process, queue, value = f"p{n % 3}", rng.randrange(4), f"m{n}"
        outcome = rng.choice(OUTCOMES)
        stored = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
        at = ends[queue] if stored else None
        h.complete(h.invoke(process, "send", value), outcome, queue=queue, offset=at)
        if stored:
            reads.append(Read(queue, ends[queue], value))
            ends[queue] += 1
    return h, reads


def test_the_checker_finds_each_anomaly_planted_in_a_long_clean_run() -> None:
    """A long run's read, changed in one way each time (an acknowledged message dropped, one copied,
    two of a producer swapped in a queue, one never sent added): the check finds that anomaly, every
    time, and the clean read passes."""
    for seed in range(20):
        rng = random.Random(seed)
        h, reads = _clean_run(rng)
        assert check(h, reads).valid, seed
        oks = {op.value for op in h.ops if op.type == "ok"}
        acked = [i for i, r in enumerate(reads) if r.value in oks]

        dropped = list(reads)
        lost = dropped.pop(rng.choice(acked))
        assert ("lost", lost.value) in {(a.kind, a.value) for a in check(h, dropped).anomalies}

        copied = reads[rng.choice(acked)]
        doubled = [*reads, Read(copied.queue, 10_000, copied.value)]
        assert "duplicated" in check(h, doubled).kinds()

        lanes: dict[tuple[str, int], list[int]] = {}
        for i in acked:
            process = next(op.process for op in h.ops if op.value == reads[i].value)
            lanes.setdefault((process, reads[i].queue), []).append(i)
        i, j = rng.choice([lane for lane in lanes.values() if len(lane) > 1])[:2]
        swapped = list(reads)
        swapped[i], swapped[j] = (
            Read(reads[i].queue, reads[i].offset, reads[j].value),
            Read(reads[j].queue, reads[j].offset, reads[i].value),
        )
        assert "reordered" in check(h, swapped).kinds()

        assert "foreign" in check(h, [*reads, Read(0, 10_000, "never")]).kinds()


def test_two_members_storing_or_acknowledging_in_one_term() -> None:
    h = History()
    h.complete(h.invoke("p0", "send", "a"), "ok", queue=0, offset=0, addr="n0")
    h.complete(h.invoke("p1", "send", "b"), "ok", queue=0, offset=1, addr="n1")
    entries = [Logged("n0", 1, 2, "a", "n0", True), Logged("n1", 1, 3, "b", "n1", True)]
    result = check_terms(entries, h)
    assert result.valid and result.counts["acked-placed"] == 2, result.summary()
    # n1's SEND_OK in term 2, its entry set aside: n0 led term 2 too
    entries.append(Logged("n1", 2, 2, "b", "n1", False))
    result = check_terms(entries, h)
    assert [(a.kind, a.value) for a in result.anomalies] == [("two-stored", "2"), ("two-acked", "2")]

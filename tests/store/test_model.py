"""Property test: random puts, restarts and crashes against a plain-Python model of the store."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from store import DefaultMessageStore, FakeClock, Message
from store.engine import GetMessageStatus
from tests.support.stores import small_config

put_op = st.tuples(
    st.just("put"),
    st.sampled_from(["A", "B", "%RETRY%g"]),
    st.integers(0, 2),
    st.binary(min_size=0, max_size=3000),
    st.lists(st.sampled_from(["x", "y", "z", "w"]), max_size=2, unique=True),
)
ops = st.lists(st.one_of(put_op, st.just(("restart",)), st.just(("crash",))), min_size=1, max_size=40)


@pytest.mark.slow
@settings(max_examples=25)
@given(ops)
def test_random_puts_restarts_and_crashes_match_the_model(operations: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = FakeClock()
        cfg = small_config(root, mapped_file_size_commit_log=8 * 1024, mapped_file_size_consume_queue=20 * 7)
        store = DefaultMessageStore(cfg, clock=clock)
        store.open()
        store.start()
        model: dict[tuple[str, int], list[tuple[bytes, list[str], int]]] = {}
        for op in operations:
            if op[0] == "put":
                _, topic, qid, body, keys = op
                clock.advance(1500)
                props = {"KEYS": " ".join(keys)} if keys else {}
                r = store.put_message(Message(topic=topic, body=body, queue_id=qid, properties=props))
                assert r.ok
                queue = model.setdefault((topic, qid), [])
                assert r.queue_offset == len(queue)
                queue.append((body, keys, r.phys_offset))
            else:
                store.shutdown()
                if (
                    op[0] == "crash"
                ):  # an abort file left behind selects abnormal recovery (re-dispatch, re-index)
                    (root / "abort").touch()
                store = DefaultMessageStore(cfg, clock=clock)
                store.open()
                store.start()
                assert store.last_exit_ok is (op[0] == "restart")
        for (topic, qid), queue in model.items():
            assert store.get_max_offset(topic, qid) == len(queue)
            offset = 0
            while (res := store.get_messages("g", topic, qid, offset, 32)).status is GetMessageStatus.FOUND:
                for s in res.messages:
                    body, _keys, phys = queue[s.queue_offset]
                    assert (s.message.body, s.phys_offset) == (body, phys)
                offset = res.next_begin_offset
            assert offset == len(queue)
        for key in ("x", "y", "z", "w"):
            for topic in ("A", "B", "%RETRY%g"):
                expected = sorted(
                    p for (t, _q), q in model.items() if t == topic for _b, ks, p in q if key in ks
                )
                got = [s.phys_offset for s in store.query_message(topic, key, 64, 0, 2**62).messages]
                assert got == expected  # at most 40 puts: below the 64-result cap
        store.shutdown()

"""The whole-table registration body a broker keeps between registrations (each topic's JSON kept until
its entry is replaced, the body kept while the table's version and what else it was made of stand): after
any sequence of topic creations, updates, deletions, reverted writes, tables replaced whole (a slave's
sync), system topics made and permission changes, the body sent must be a from-scratch encoding of the
current table, and the CRC sent with it that body's; GET_ALL_TOPIC_CONFIG's body, kept the same way, too."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from daemon.broker import broker as broker_module
from daemon.broker.broker import Broker
from daemon.remoting import bodies as bodies_module
from daemon.remoting.bodies import PermName, RegisterBrokerBody
from store.models import TopicConfig
from tests.support.broker import broker_config

NAMES = st.sampled_from(
    ["A", "B", "Bulk07", "Bulk31", "Zz", "%RETRY%G", "%DLQ%G", "TBW102", "SELF_TEST_TOPIC"]
)
#: Enough topics that one or two changes take the kept names' insertion path, not a new sort.
BULK = 40


class TableTextMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="table-text-"))
        self.broker = Broker(broker_config(self.root / "store"))
        self.broker._open_store()
        self.slice = broker_module.REGISTER_SLICE
        broker_module.REGISTER_SLICE = 3  # several slices, so kept names meet new ones at slice edges

    def teardown(self) -> None:
        broker_module.REGISTER_SLICE = self.slice
        self.broker.store.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize()
    def bulk(self) -> None:
        for i in range(BULK):
            self.broker.topics.put(TopicConfig(f"Bulk{i:02d}", 1 + i % 3, 1 + i % 3), persist=False)

    @rule(
        name=NAMES,
        queues=st.integers(1, 16),
        perm=st.sampled_from([2, 4, 6, 7]),
        order=st.booleans(),
        multi=st.booleans(),
    )
    def put(self, name: str, queues: int, perm: int, order: bool, multi: bool) -> None:
        filter_type = "MULTI_TAG" if multi else "SINGLE_TAG"
        config = TopicConfig(name, queues, queues, perm, filter_type, order=order)
        self.broker.topics.put(config, persist=False)

    @rule(name=NAMES)
    def put_equal(self, name: str) -> None:
        """An update that changes nothing (a new, equal entry)."""
        old = self.broker.topics.get(name)
        if old is not None:
            self.broker.topics.put(TopicConfig.from_json(old.to_json()), persist=False)

    @rule(name=NAMES)
    def delete(self, name: str) -> None:
        self.broker.topics.file.delete(name)  # (the manager's delete, without the journal's write)

    @rule(name=NAMES, queues=st.integers(1, 8))
    def reverted(self, name: str, queues: int) -> None:
        """An update whose write failed, undone (the old entry, the very object, back)."""
        old = self.broker.topics.get(name)
        config = TopicConfig(name, queues, queues)
        self.broker.topics.put(config, persist=False)
        self.broker.topics.revert(config, old)

    @rule(name=NAMES, queues=st.integers(1, 8), drop=NAMES)
    def replaced_whole(self, name: str, queues: int, drop: str) -> None:
        """A slave's sync: the master's table and data version decoded over this one."""
        file = self.broker.topics.file
        data = file.encode()
        data["topicConfigTable"][name] = TopicConfig(name, queues, queues).to_file_json()
        data["topicConfigTable"].pop(drop, None)
        with file.lock:
            file.decode(data)

    @rule(name=st.sampled_from(["Auto1", "Auto2", "A"]), queues=st.integers(1, 8))
    def auto_created(self, name: str, queues: int) -> None:
        self.broker.topics.create_in_send(name, "TBW102", queues, 0)

    @rule(name=st.sampled_from(["%RETRY%G", "%DLQ%G", "RMQ_SYS_TRANS_HALF_TOPIC"]))
    def system_like(self, name: str) -> None:
        self.broker.topics.create_system_like(name, 1, PermName.READ_WRITE)

    @rule()
    def system_topics(self) -> None:
        """Made again at start (a deleted one comes back; no data version moves)."""
        self.broker.topics.create_system_topics()

    @rule()
    def new_version(self) -> None:
        """The data version moved with no entry changed (the table's generation stands)."""
        self.broker.topics.new_version()

    @rule(perm=st.sampled_from([2, 4, 6]))
    def broker_permission(self, perm: int) -> None:
        self.broker.config.broker_permission = perm

    @rule(parts=st.integers(0, 3))
    def cut_short(self, parts: int) -> None:
        """A registration cancelled while its body was being encoded, after ``parts`` slices."""
        body = RegisterBrokerBody(self.broker.registration_wrapper(), [])
        encoding = body.encode_parts(False, 3, self.broker._table_text)
        for _ in zip(range(parts), encoding, strict=False):
            pass
        del encoding  # (a generator dropped is closed there and then, as a cancelled task's is)

    @rule(names=st.lists(NAMES | st.sampled_from(["Auto1", "Gone9"]), max_size=3), compressed=st.booleans())
    def registered_alone(self, names: list[str], compressed: bool) -> None:
        """Topics registered alone as they are created (or named and missing): their text kept ahead."""
        asyncio.run(self.broker._registration_body(names, compressed))

    @rule(compressed=st.booleans())
    def register(self, compressed: bool) -> None:
        sent = asyncio.run(self.broker._registration_body(None, compressed))
        fresh = RegisterBrokerBody(self.broker.registration_wrapper(), []).encode(compressed)
        if compressed:
            assert zlib.decompress(sent) == zlib.decompress(fresh)
        else:
            assert sent == fresh
        assert RegisterBrokerBody.decode(sent, compressed) == RegisterBrokerBody.decode(fresh, compressed)
        kept = self.broker._table_body
        assert kept is not None and kept[2] is sent
        assert kept[3] == zlib.crc32(sent) & 0x7FFFFFFF  # the header's bodyCrc32

    @rule()
    def all_topic_config(self) -> None:
        """GET_ALL_TOPIC_CONFIG's body, its entries kept between calls: a from-scratch encoding."""
        wrapper = self.broker.topics.wrapper()
        assert self.broker.topics.all_json() == (wrapper.dumps() if wrapper.topic_config_table else None)
        again = self.broker.topics.all_json()  # nothing changed: the body kept whole, not joined anew
        assert again is None or again is self.broker.topics.all_json()

    @invariant()
    def table_text_names_only_topics(self) -> None:
        text = self.broker._table_text
        assert text._names == sorted(set(text._names))
        assert text._listed == set(text._names)


TableTextMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25)
test_table_text = pytest.mark.slow(TableTextMachine.TestCase)


def test_topics_registered_alone_are_not_encoded_again_in_the_next_whole_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of creations registers each topic alone; the whole body after it (30 s later) re-encoded
    every one of them on the loop, ~60 ms of its CPU with 10,000."""
    broker = Broker(broker_config(tmp_path / "store"))
    broker._open_store()
    try:
        base = set(broker.topics.file.table)
        for i in range(200):
            name = f"Burst{i:03d}"
            broker.topics.put(TopicConfig(name, 4, 4), persist=False)
            asyncio.run(broker._registration_body([name], False))
        broker.topics.file.delete("Burst007")  # noted, then deleted before any whole body
        encoded: list[object] = []
        real = bodies_module.fastjson.dumps
        monkeypatch.setattr(
            bodies_module.fastjson, "dumps", lambda v, **kw: encoded.append(v) or real(v, **kw)
        )
        sent = asyncio.run(broker._registration_body(None, False))
        monkeypatch.undo()
        assert sent == RegisterBrokerBody(broker.registration_wrapper(), []).encode(False)
        # the table's own topics (made at start, never registered alone) and the body's frame, no burst topic
        burst = [v for v in encoded if isinstance(v, dict) and any(str(k).startswith("Burst") for k in v)]
        assert not burst
        assert sum(isinstance(v, dict) for v in encoded) == len(base)
        assert "Burst007" not in broker._table_text._texts
    finally:
        broker.store.shutdown()

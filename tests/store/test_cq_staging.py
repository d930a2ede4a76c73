"""Staged ConsumeQueue units: a running store's puts append their units to the queue's stage and the flush
thread copies them into the files (``settle_queues``). Readers see a staged unit at once and are never
served a unit that later changes; files, flushes and the checkpoint cover settled units only; every change
of the files that is not a put (truncation, repair, close) settles first; a SIGKILL loses staged units, and
recovery rebuilds them from the CommitLog."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings, strategies as st

from store import DefaultMessageStore, Message
from store.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue, settle_queues
from tests.support.stores import kill_writer, small_config

PER_FILE = 50  # small_config's ConsumeQueue files hold 50 units


def _idle_flush(root: Path) -> DefaultMessageStore:
    """A started store whose flush threads do not tick during the test: only the test settles."""
    store = DefaultMessageStore(
        small_config(
            root, flush_interval_consume_queue=600_000, flush_consume_queue_thorough_interval=600_000
        )
    )
    store.open()
    store.start()
    return store


def _cq(store: DefaultMessageStore, topic: str) -> ConsumeQueue:
    cq = store.get_consume_queue(topic, 0)
    assert cq is not None
    return cq


def _file_units(cq: ConsumeQueue) -> list[tuple[int, int, int]]:
    """The units in the queue's files up to each file's settled end."""
    return [
        UNIT.unpack_from(mf.view, pos)
        for mf in cq.files.files
        for pos in range(0, mf.wrote_position, CQ_STORE_UNIT_SIZE)
    ]


def test_staged_units_are_read_at_once_and_the_same_once_settled(tmp_path: Path) -> None:
    store = _idle_flush(tmp_path)
    try:
        puts = [store.put_message(Message("S", b"m%d" % i)) for i in range(PER_FILE * 2 + 7)]
        assert all(p.ok for p in puts)
        cq = _cq(store, "S")
        assert cq.stage is not None
        # two files filled (settled when the queue rolled), 7 units staged in the third
        last = cq.files.last_file()
        assert last is not None and len(cq.files.files) == 3 and last.wrote_position == 0
        assert cq.max_offset == len(puts) == store.get_max_offset("S", 0)
        before = [cq.get_unit(q) for q in range(len(puts))]
        assert [u[0] if u else None for u in before] == [p.phys_offset for p in puts]
        got = store.get_messages("G", "S", 0, PER_FILE * 2, 32)
        assert [m.message.body for m in got.messages] == [b"m%d" % i for i in range(PER_FILE * 2, len(puts))]
        staged = store.consume_queue_units("S", 0, PER_FILE * 2 + 3, 10)
        assert staged is not None and staged[2] == before[PER_FILE * 2 + 3 :]

        settle_queues([cq])
        assert last.wrote_position == 7 * CQ_STORE_UNIT_SIZE
        assert _file_units(cq) == before
        assert [cq.get_unit(q) for q in range(len(puts))] == before
        assert [m.message.body for m in store.get_messages("G", "S", 0, PER_FILE * 2, 32).messages] == [
            m.message.body for m in got.messages
        ]
        # a put after the settle stages again, behind the settled units
        assert store.put_message(Message("S", b"more")).queue_offset == len(puts)
        assert last.wrote_position == 7 * CQ_STORE_UNIT_SIZE and cq.max_offset == len(puts) + 1
        assert store.get_messages("G", "S", 0, len(puts), 4).messages[0].message.body == b"more"
    finally:
        store.shutdown()
    with DefaultMessageStore(small_config(tmp_path), read_only=True) as view:  # shutdown settled them all
        assert view.get_max_offset("S", 0) == len(puts) + 1
        assert view.get_messages("G", "S", 0, len(puts), 4).messages[0].message.body == b"more"


def test_a_flush_and_the_checkpoint_cover_staged_units(tmp_path: Path) -> None:
    store = _idle_flush(tmp_path)
    try:
        for i in range(5):
            assert store.put_message(Message("F", b"f%d" % i)).ok
        cq = _cq(store, "F")
        last = cq.files.last_file()
        assert last is not None and last.wrote_position == 0
        store._checkpoint()  # what the flush thread's thorough flush runs
        assert last.wrote_position == last.flushed_position == 5 * CQ_STORE_UNIT_SIZE
    finally:
        store.shutdown()


def _reference(root: Path) -> ConsumeQueue:
    cq = ConsumeQueue(str(root), "T", 0, PER_FILE * CQ_STORE_UNIT_SIZE)
    cq.load()
    return cq


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 40)),
        st.tuples(st.just("settle"), st.just(0)),
        st.tuples(st.just("cut"), st.integers(0, 200)),
        st.tuples(st.just("flush"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_a_staging_queue_holds_what_a_queue_storing_each_unit_holds(steps: list[tuple[str, int]]) -> None:
    """Puts (across file rolls), background settles, cuts (``truncate_to``) and flushes, on a staging queue
    and on one storing every unit into its file: both read the same units after every step, and the same
    file bytes once settled."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        staged, direct = _reference(Path(d) / "a"), _reference(Path(d) / "b")
        staged.start_staging()
        phys = 0
        for op, n in steps:
            if op == "put":
                for _ in range(n):
                    q = staged.max_offset
                    for cq in (staged, direct):
                        cq.put_unit(phys, 10, q, q)
                    phys += 10
            elif op == "settle":
                settle_queues([staged])
            elif op == "cut":
                keep = min(n, staged.max_offset)
                for cq in (staged, direct):
                    cq.truncate_to(keep)
                phys = keep * 10
            else:
                staged.flush()
                assert all(mf.flushed_position == mf.wrote_position for mf in staged.files.files)
            assert staged.max_offset == direct.max_offset
            units = [direct.get_unit(q) for q in range(direct.min_offset, direct.max_offset)]
            assert [staged.get_unit(q) for q in range(staged.min_offset, staged.max_offset)] == units
            for q in range(staged.min_offset, staged.max_offset, 7):
                view = staged.units_from(q)
                assert view is not None
                assert list(UNIT.iter_unpack(view)) == units[q - staged.min_offset :][: len(view) // 20]
        staged.settle()
        assert [mf.view[: mf.wrote_position].tobytes() for mf in staged.files.files] == [
            mf.view[: mf.wrote_position].tobytes() for mf in direct.files.files
        ]
        staged.close()
        direct.close()


WRITER = """
import sys
from store import DefaultMessageStore, Message
from tests.support.stores import small_config
store = DefaultMessageStore(small_config(sys.argv[1], flush_interval_consume_queue=200))
store.open(); store.start()
i = 0
while True:
    put = store.put_message(Message("K%d" % (i % 37), b"x%d" % i))
    assert put.ok
    print(i % 37, put.queue_offset, put.phys_offset, flush=True)
    i += 1
"""


def test_a_sigkill_mid_flood_loses_no_acknowledged_unit(tmp_path: Path) -> None:
    """Units staged when the writer dies are rebuilt from the CommitLog by the next start's recovery."""
    acked = kill_writer(WRITER, tmp_path, after=3000)
    with DefaultMessageStore(small_config(tmp_path)) as store:
        for topic, qoff, phys in acked:
            unit = store.get_consume_queue(f"K{topic}", 0)
            assert unit is not None
            got = unit.get_unit(qoff)
            assert got is not None and got[0] == phys, (topic, qoff)
        for t in range(37):
            cq = store.get_consume_queue(f"K{t}", 0)
            assert cq is not None
            ends = [q for topic, q, _ in acked if topic == t]
            assert cq.max_offset >= (max(ends) + 1 if ends else 0)
            assert _file_units(cq) == [cq.get_unit(q) for q in range(cq.max_offset)]  # rebuilt into the files

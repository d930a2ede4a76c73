"""A follower reads its leader's binary pushes by the layout the leader writes them in (the leader's own
template, learnt from the first such push of a term): no JSON decode, no command. What it reads so is what
the generic read would have read, answered the same; anything else goes to the generic read (another layout
or term, a sender the peer gate has not admitted, numbers the leader would not write). In this process: a
follower's DLedger server over a real log, the pushes handed to its listener's connection as frames."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from daemon.dledger.machines import PushState, Timings
from daemon.dledger.protocol import (
    BINARY_PUSH_CODE,
    PUSH_ANSWER,
    BinaryPushFrames,
    PushEntryRequest,
    binary_push_fields,
    decode_push_answer,
    push_answer_frame,
    read_answer_header,
    split_numbers_py,
)
from daemon.dledger.server import DLedgerServer, DLedgerSettings, _Answer as Answer, now_ms
from daemon.remoting.codes import FLAG_ONEWAY
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.frame import decode_frame, encode_command
from store.dledger_log import DLedgerLog
from tests.store.test_dledger_log import _fill
from tests.support.transport import RecordingTransport

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
NUMBERS = st.integers(-(2**63), 2**63 - 1)


def push_frame(
    raw: bytes, first: int, count: int, opaque: int, *, term: int = 1, commit: int = -1, **fields: str
) -> bytes:
    """A leader's binary push as the generic path encodes it (the bytes the leader's template writes)."""
    req = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=term)
    req.commit_index = commit
    ext = binary_push_fields(req, first, count)
    ext.update(fields)
    cmd = RemotingCommand.request(BINARY_PUSH_CODE, ext, raw)
    cmd.opaque = opaque
    return encode_command(cmd)


@given(NAMES, NAMES, NAMES, NUMBERS, NUMBERS, NUMBERS, NUMBERS, st.integers(0, 2**31 - 1))
def test_a_push_header_reads_back_its_numbers_by_the_template_that_wrote_it(
    group: str, leader: str, follower: str, term: int, commit: int, first: int, count: int, opaque: int
) -> None:
    req = PushEntryRequest(group=group, leader_id=leader, local_id=leader, remote_id=follower, term=term)
    frames = BinaryPushFrames(req)
    head = bytearray(b"xy" + frames.head(opaque, commit, first, count, 0) + b"z")
    assert frames.read(head, 10, len(head) - 1) == (commit, first, count, opaque)
    other = BinaryPushFrames(
        PushEntryRequest(group=group, leader_id=leader, local_id=leader, remote_id=follower, term=term ^ 1)
    )
    assert other.read(head, 10, len(head) - 1) is None  # (another term's template)


@pytest.mark.parametrize(
    "change",
    [
        (b'"index":"7"', b'"index":"07"'),  # leading zero
        (b'"index":"7"', b'"index":"-0"'),
        (b'"index":"7"', b'"index":"7a"'),
        (b'"index":"7"', b'"index":""'),
        (b'"count":"2"', b'"count":"2 "'),
        (b'"opaque":11', b'"opaque":1e1'),
        (b'"opaque":11', b'"opaque":011'),
        (b'"commitIndex":"5"', b'"commitIndex":"55555555555555555555"'),  # 20 digits
        (b'"term":"3"', b'"term":"4"'),
        (b'"language":"JAVA"', b'"language":"JAVB"'),
        (b'"version"', b'"versioN"'),
    ],
)
def test_a_header_the_template_did_not_write_is_not_read_by_it(change: tuple[bytes, bytes]) -> None:
    req = PushEntryRequest(group="g", leader_id="n0", local_id="n0", remote_id="n1", term=3)
    frames = BinaryPushFrames(req)
    head = frames.head(11, 5, 7, 2, 0)[8:]
    assert frames.read(bytearray(head), 0, len(head)) == (5, 7, 2, 11)
    assert change[0] in head
    changed = bytearray(head.replace(change[0], change[1]))
    assert frames.read(changed, 0, len(changed)) is None
    assert frames.read(bytearray(head), 0, len(head) - 1) is None  # (cut short)


@dataclass
class Follower:
    server: DLedgerServer
    log: DLedgerLog
    conn: Connection
    transport: RecordingTransport
    #: what the connection's frame reader returned, each call with a frame's prefix at least in the buffer
    #: (0: left to the generic read)
    taken: list[int]

    def watch(self) -> None:
        """Record what the installed frame reader takes (the connection's own attribute, wrapped)."""
        reader = self.conn.frame_reader
        if reader is not None and not isinstance(reader, Watched):
            self.conn.frame_reader = Watched(reader, self.taken)

    async def feed(self, data: bytes) -> None:
        self.watch()
        self.conn.data_received(data)
        self.watch()
        await asyncio.sleep(0)  # (a loop turn: what a push scheduled runs)
        await asyncio.sleep(0)

    def answers(self) -> list[tuple[int, int, int, int, int, int]]:
        """Each answer written: (opaque, code, term, index, count, end index)."""
        out = []
        for frame in self.transport.writes:
            at = 0
            while at < len(frame):
                read = decode_frame(frame, at)
                assert read is not None
                cmd, used = read
                a = decode_push_answer(cmd.body, "g")
                out.append(
                    (cmd.opaque, a.code, a.term, a.index if a.index is not None else -1, a.count, a.end_index)
                )
                at += used
        return out


class Watched:
    def __init__(self, reader: Callable[[Connection, bytearray, int], int], taken: list[int]) -> None:
        self.reader, self.taken = reader, taken

    def __call__(self, conn: Connection, buf: bytearray, pos: int) -> int:
        n = self.reader(conn, buf, pos)
        if len(buf) - pos >= 8:
            self.taken.append(n)
        return n


async def follower(root: Path, name: str) -> Follower:
    log = DLedgerLog(str(root / name))
    server = DLedgerServer(DLedgerSettings("g", "n1", dict(PEERS), str(root / name), Timings()), log)
    server.gate.resolve()
    server.node.m.term = 1
    server.node._now = now_ms()
    server.node.to_follower(1, "n0")
    conn = server.server.accept()
    assert isinstance(conn, Connection)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return Follower(server, log, conn, transport, [])


@pytest.fixture()
async def pair(tmp_path: Path) -> AsyncIterator[tuple[DLedgerLog, Follower, Follower]]:
    leader = DLedgerLog(str(tmp_path / "leader"))
    _fill(leader, 40)
    fast, generic = await follower(tmp_path, "fast"), await follower(tmp_path, "generic")
    yield leader, fast, generic
    for f in (fast, generic):
        await f.server.server.stop(grace=0)
        await f.server.client.close()
        f.log.close()
    leader.close()


def command(frame: bytes) -> RemotingCommand:
    read = decode_frame(frame)
    assert read is not None
    return read[0]


def run(leader: DLedgerLog, first: int, count: int) -> bytes:
    got = leader.raw_entries(first, count, 1 << 20)
    assert got is not None and got[0] == count
    return got[1]


async def test_pushes_read_by_their_layout_are_taken_and_answered_as_the_generic_read_does(
    pair: tuple[DLedgerLog, Follower, Follower],
) -> None:
    """The same pushes (one at a time, two in one read, one split across reads) to a follower reading them by
    their layout and to one whose reader is taken away before every read: the same answers, the same log."""
    leader, fast, generic = pair
    frames = [push_frame(run(leader, 3 * n, 3), 3 * n, 3, 100 + n, commit=3 * n - 1) for n in range(12)]
    feeds = [frames[0], frames[1], frames[2] + frames[3], frames[4][:50], frames[4][50:] + frames[5][:9]]
    feeds += [frames[5][9:], *frames[6:]]
    for data in feeds:
        await fast.feed(data)
        generic.conn.frame_reader = None
        await generic.feed(data)
    assert fast.answers() == generic.answers()
    assert [a[0] for a in fast.answers()] == list(range(100, 112))
    assert {a[1] for a in fast.answers()} == {200}
    assert (fast.log.last_index, fast.log.committed_index) == (35, 32)
    assert (generic.log.last_index, generic.log.committed_index) == (35, 32)
    for index in range(36):
        assert fast.log.get(index) == generic.log.get(index) == leader.get(index)
    # the first push by the generic read, the other eleven by the layout (the split one once it is whole)
    assert sum(1 for n in fast.taken if n > 0) == 11 and generic.taken == []


async def test_what_the_layout_does_not_cover_goes_to_the_generic_read(
    pair: tuple[DLedgerLog, Follower, Follower],
) -> None:
    """A new term's pushes (its layout learnt from the first), a sender the peer gate has to check again, a
    one-way push, a number with a leading zero and a push that asks for a JSON answer: each read as
    before, answered as before."""
    leader, fast, generic = pair
    for f in (fast, generic):
        f.server.node.m.term = 2
        f.server.node.to_follower(2, "n0")
    zero = push_frame(run(leader, 4, 2), 4, 2, 6, term=2, commit=3, index="04")
    oneway = decode_frame(push_frame(run(leader, 6, 2), 6, 2, 7, term=2, commit=5))
    assert oneway is not None
    oneway[0].flag |= FLAG_ONEWAY
    feeds = [
        push_frame(run(leader, 0, 2), 0, 2, 1, commit=-1),  # term 1: refused (EXPIRED_TERM) as before
        push_frame(run(leader, 0, 2), 0, 2, 2, term=2, commit=-1),  # learns term 2's layout
        push_frame(run(leader, 2, 2), 2, 2, 3, term=2, commit=1),  # by the layout
        b"gate",
        zero,
        encode_command(oneway[0]),
        push_frame(run(leader, 8, 2), 8, 2, 8, term=2, commit=7, mqctlAnswer="0"),  # a JSON answer
        push_frame(run(leader, 8, 2), 8, 2, 9, term=2, commit=7),  # by the layout again
    ]
    for data in feeds:
        if data == b"gate":
            fast.server.gate.admitted_senders.clear()  # (a restart of its cache: checked in full again)
            generic.server.gate.admitted_senders.clear()
            data = push_frame(run(leader, 2, 2), 2, 2, 4, term=2, commit=1)
        await fast.feed(data)
        generic.conn.frame_reader = None
        await generic.feed(data)
    assert fast.transport.writes == generic.transport.writes
    codes = [
        decode_push_answer(cmd.body, "g").code
        for cmd in map(command, fast.transport.writes)
        if cmd.body[:1] == b"\x01"
    ]
    assert codes[0] != 200 and set(codes[1:]) == {200}  # (the term-1 push refused, every other taken)
    assert fast.log.last_index == generic.log.last_index == 9
    assert [n > 0 for n in fast.taken] == [False, True, False, False, False, False, True]


@given(st.integers(0, 2**31 - 1), st.integers(-(2**31), 2**31 - 1), NUMBERS, NUMBERS)
def test_an_answer_header_reads_back_its_opaque(opaque: int, code: int, term: int, index: int) -> None:
    frame = bytearray(push_answer_frame(opaque, code, term, index, 3, 0, index))
    end = len(frame) - PUSH_ANSWER.size
    assert read_answer_header(frame, 8, end) == opaque
    assert read_answer_header(frame, 8, end - 1) is None
    changed = frame.replace(b'"flag":1', b'"flag":3')
    assert read_answer_header(changed, 8, end) is None


async def leader_reading(root: Path, fast: bool) -> tuple[int, int, list[int]]:
    """A leader's binary push to n1 answered on its connection, read by the layout (``fast``) or by the
    generic read: (n1's water mark, the committed index, what the frame reader returned)."""
    log = DLedgerLog(str(root / ("fast" if fast else "generic")))
    _fill(log, 10)
    server = DLedgerServer(DLedgerSettings("g", "n0", dict(PEERS), str(root), Timings()), log)
    node = server.node
    node.m.term, node._now = 1, now_ms()
    node.to_leader(1)
    node.term_first_index = 0  # (its log's entries count as this term's: a push commits them)
    push = node.pushes["n1"]
    push.state, push.binary, push.write_index = PushState.APPEND, True, 0
    conn = Connection(RequestDispatcher(), requester=True)
    conn.connection_made(RecordingTransport())  # type: ignore[arg-type]
    server._binary["n1"] = conn
    out = node._raw_push("n1", 0, 10, run(log, 0, 10))
    out.epoch = push.epoch
    opaque = conn.expect(BINARY_PUSH_CODE, 3, Answer(server, out, conn))
    taken: list[int] = []
    if fast:
        conn.frame_reader = Watched(server._read_answer, taken)
    answer = push_answer_frame(opaque, 200, 1, 0, 10, 0, 9)
    conn.data_received(answer[:20])
    conn.data_received(answer[20:] + b"\0\0\0")  # (and the start of the next frame)
    assert conn.expecting(opaque) is None
    mark, committed = push.water_mark, log.committed_index
    await server.client.close()
    log.close()
    return mark, committed, taken


async def test_a_leader_reads_its_followers_binary_answers_by_their_layout(tmp_path: Path) -> None:
    """The answer to a binary push read without a JSON decode moves the follower's water mark and the commit
    as the generic read of it does."""
    mark, committed, taken = await leader_reading(tmp_path, True)
    assert (mark, committed) == (9, 9)
    assert [n > 0 for n in taken] == [False, True]  # (the first read held no whole frame)
    assert (await leader_reading(tmp_path, False))[:2] == (mark, committed)


PIECES = st.sampled_from([b'"', b",", b'":"', b"a", b"-", b"0", b"7", b"", b'{"k":'])


@given(
    st.lists(st.lists(PIECES, max_size=3).map(b"".join), min_size=2, max_size=5),
    st.lists(
        st.integers(-(2**64), 2**64).map(lambda n: str(n).encode())
        | st.sampled_from([b"", b"-", b"-0", b"00", b"012", b"1a", b" 1", b"9" * 19, b"9" * 20]),
        min_size=4,
        max_size=4,
    ),
    st.integers(-2, 3),
    st.integers(-3, 2),
)
def test_the_numbers_of_a_template_are_split_in_c_as_in_python(
    parts: list[bytes], numbers: list[bytes], lead: int, trail: int
) -> None:
    """store._cparse.split_numbers reads what the pure-Python split reads (the compiled build's), whatever the
    parts and what stands where the numbers go; skipped without the build."""
    c = pytest.importorskip("store._cparse")
    body = parts[0] + b"".join(n + p for n, p in zip(numbers, parts[1:], strict=False))
    buf = bytearray(b"xx" + body + b"yy")
    start, end = 2 + lead, 2 + len(body) + trail
    want = split_numbers_py(buf, start, end, tuple(parts))
    assert c.split_numbers(buf, start, end, tuple(parts)) == want
    if lead == 0 and trail == 0:
        written = numbers[: len(parts) - 1]
        separated = all(p and p[:1] not in b"-0123456789" for p in parts[1:-1])
        if all(map(_as_written, written)) and separated and parts[-1][:1] not in b"-0123456789":
            assert want == tuple(int(n) for n in written)


def _as_written(n: bytes) -> bool:
    """``n`` is a long as ``%d`` writes it (b"", b"-0", b"012" and the like are not)."""
    try:
        value = int(n)
    except ValueError:
        return False
    return n == str(value).encode() and -(2**63) <= value < 2**63

"""The binary push between mqctl members, and 4.9.8's JSON push for any peer that never said it reads one.

Two members of ours and, as the third, a stand-in for a 4.9.8 member: it answers as DLedger 0.3.1.2's
``DLedgerRpcNettyService`` does (JSON beans, nothing in the answer's extFields, no processor for a code
outside `DLedgerRequestCode`) and records every request code it is sent. The leader must push it JSON
only, and push the other member of ours binary, whose files then equal the leader's byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.dledger.protocol import (
    BINARY_ANSWER_KEY,
    BINARY_PUSH_CODE,
    BINARY_PUSH_KEY,
    REMOTING_RESPONSE_CODE,
    DLedgerEntry,
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    binary_push_fields,
    decode_push_answer,
    is_push_answer,
)
from daemon.remoting.client import RemotingClient, parse_addr
from daemon.remoting.codes import ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.server import RemotingServer
from tests.dledger.test_peer_gate import running, settled
from tests.dledger.test_rejoin import members
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

Code = DLedgerResponseCode


class Dledger0312Follower:
    """A 4.9.8 member's DLedger port, as far as a follower answers heartbeats, pushes and votes."""

    def __init__(self, addr: str) -> None:
        host, port = parse_addr(addr)
        self.codes: list[int] = []
        self.entries: list[DLedgerEntry] = []
        self.term, self.voted_for = 0, ""
        self.server = RemotingServer(
            {
                int(DLedgerRequestCode.HEART_BEAT): self._heartbeat,
                int(DLedgerRequestCode.PUSH): self._push,
                int(DLedgerRequestCode.VOTE): self._vote,
            },
            host=host,
            port=port,
            default_processor=self._unsupported,
            idle_timeout=0,
        )

    def _unsupported(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # (NettyRemotingAbstract#processRequestCommand: no processor registered for the code)
        self.codes.append(request.code)
        return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"{request.code} not supported")

    def _heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.codes.append(request.code)
        return request.make_response(REMOTING_RESPONSE_CODE, None, None, HeartBeatResponse().encode())

    def _vote(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """``DLedgerLeaderElector#handleVote``'s checks, in its order (it never stands)."""
        self.codes.append(request.code)
        req = VoteRequest.decode(request.body)
        end_term = self.entries[-1].term if self.entries else -1
        result = VoteResult.ACCEPT
        if req.ledger_end_term < end_term:
            result = VoteResult.REJECT_EXPIRED_LEDGER_TERM
        elif req.ledger_end_term == end_term and req.ledger_end_index < len(self.entries) - 1:
            result = VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        elif req.term < self.term:
            result = VoteResult.REJECT_EXPIRED_VOTE_TERM
        elif req.term > self.term:
            self.term, self.voted_for = req.term, ""
            result = VoteResult.REJECT_TERM_NOT_READY
        elif self.voted_for not in ("", req.leader_id):
            result = VoteResult.REJECT_ALREADY_VOTED
        else:
            self.voted_for = req.leader_id or ""
        resp = VoteResponse(vote_result=result, term=self.term)
        return request.make_response(REMOTING_RESPONSE_CODE, None, None, resp.encode())

    def _push(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.codes.append(request.code)
        req = PushEntryRequest.decode(request.body)
        code = Code.SUCCESS
        if req.type is PushType.COMPARE:
            assert req.entry is not None
            code = Code.SUCCESS if req.entry.index < len(self.entries) else Code.INCONSISTENT_STATE
        elif req.type is PushType.TRUNCATE:
            assert req.entry is not None
            del self.entries[req.entry.index :]
            self.entries.append(req.entry)
        elif req.type is PushType.APPEND:
            for entry in req.entries():
                if entry.index == len(self.entries):
                    self.entries.append(entry)
                elif entry.index > len(self.entries):
                    code = Code.INCONSISTENT_STATE
                    break
        resp = PushEntryResponse(code=int(code), term=req.term, group=req.group)
        if req.type is not PushType.COMMIT:
            resp.index, resp.count = req.first_entry_index, req.count
        resp.begin_index, resp.end_index = (0 if self.entries else -1), len(self.entries) - 1
        return request.make_response(REMOTING_RESPONSE_CODE, None, None, resp.encode())


def _files(root: Path) -> dict[str, bytes]:
    """A member's DLedger data and index files (their written bytes), by name."""
    return {
        f"{p.parent.name}/{p.name}": p.read_bytes().rstrip(b"\0")
        for p in sorted(root.glob("dledger-*/*/0*"))
        if p.parent.name in ("data", "index")
    }


async def test_members_push_each_other_binary_and_a_silent_peer_only_json(tmp_path: Path) -> None:
    keys = members(tmp_path)
    fake = Dledger0312Follower(keys[2]["dleger_peers"].split(";")[2].partition("-")[2])
    await fake.server.start()
    brokers = await running(keys[:2])
    client = RemotingClient()
    try:
        leader, _on = await settled(brokers, client, sends=40)
        assert leader.dledger is not None
        follower = next(b for b in brokers if b is not leader)
        assert follower.dledger is not None
        ours = follower.dledger.settings.self_id
        last = leader.dledger.log.last_index
        await wait_until(lambda: len(fake.entries) == last + 1, 20)
        node = leader.dledger.node
        assert node.pushes[ours].binary and not node.pushes["n2"].binary
        assert leader.dledger.log.keep_recent  # (the stand-in's JSON pushes carry what the leader keeps)
        assert set(leader.dledger._binary) == {ours}
        # the stand-in: never a binary push, every entry as JSON, as the leader holds it
        assert BINARY_PUSH_CODE not in fake.codes and int(DLedgerRequestCode.PUSH) in fake.codes
        for entry in fake.entries:
            held = leader.dledger.log.get(entry.index)
            assert (entry.body, entry.pos, entry.term, entry.body_crc) == (
                held.body,
                held.pos,
                held.term,
                held.body_crc,
            )
        # the member of ours took binary pushes: its files are the leader's, byte for byte
        await wait_until(lambda: follower.dledger is not None and follower.dledger.log.last_index == last, 20)
        leader.dledger.log.flush()
        follower.dledger.log.flush()
        leader_files = _files(Path(leader.config.store_path_root_dir))
        assert leader_files and _files(Path(follower.config.store_path_root_dir)) == leader_files
        # and each answer of ours says so, which the stand-in's never do
        answer = await client.invoke(
            follower.dledger.settings.peers[ours],
            RemotingCommand.request(int(DLedgerRequestCode.METADATA), body=b"{}"),
            2.0,
        )
        assert answer.ext_fields.get(BINARY_PUSH_KEY) == "1"
        # the leader read our member's answers to its binary pushes (in their binary layout): its water mark
        await wait_until(lambda: node.pushes[ours].water_mark >= last, 20)
        # both ends read those frames by their layouts: the leader the answers, our member the pushes
        assert leader.dledger._binary[ours].frame_reader == leader.dledger._read_answer
        readers = [c.frame_reader for c in follower.dledger.server.connections]
        assert follower.dledger._read_push in readers
        # a binary push asking for it is answered in that layout, one that does not (an older member of
        # ours) in DLedger's JSON, as before: the same fields either way
        m = leader.dledger.node.m
        push = PushEntryRequest(group=m.group, leader_id=m.self_id, local_id=m.self_id, remote_id=ours)
        push.term = m.term + 100  # (refused for its term: nothing appended)
        fields = binary_push_fields(push, last + 1, 1)
        asked = await client.invoke(
            follower.dledger.settings.peers[ours],
            RemotingCommand.request(BINARY_PUSH_CODE, dict(fields)),
            2.0,
        )
        del fields[BINARY_ANSWER_KEY]
        plain = await client.invoke(
            follower.dledger.settings.peers[ours], RemotingCommand.request(BINARY_PUSH_CODE, fields), 2.0
        )
        assert asked.code == plain.code == REMOTING_RESPONSE_CODE
        assert is_push_answer(asked.body) and not asked.ext_fields
        assert not is_push_answer(plain.body) and plain.ext_fields == {BINARY_PUSH_KEY: "1"}
        as_binary = decode_push_answer(asked.body, m.group)
        assert as_binary == PushEntryResponse.decode(plain.body)
        assert (as_binary.code, as_binary.index, as_binary.count) == (Code.INCONSISTENT_TERM, last + 1, 1)
    finally:
        await client.close()
        for b in brokers:
            await b.stop()
        await fake.server.stop(grace=0)

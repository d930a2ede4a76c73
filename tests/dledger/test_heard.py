"""A member keeps on disk until when it refuses other candidates (its `heard` file), before the heartbeat
answer that promises it goes out, so that a restart keeps the promise (docs/dledger.md §a-restart-keeps-the-promise).
In this process: a member's DLedger server over a real log, asked on its port as a peer asks it. The
election rules are tests/dledger/test_machines.py's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.config import parse_properties
from daemon.dledger import server as server_module
from daemon.dledger.machines import Timings
from daemon.dledger.protocol import (
    DLedgerRequestCode,
    DLedgerResponseCode,
    HeartBeatRequest,
    HeartBeatResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from daemon.dledger.server import DLedgerServer, DLedgerSettings, now_ms
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.clock import boot_id, boot_ms
from store.dledger import HEARD_FILE, encode_heard, load_heard
from store.dledger_log import DLedgerLog
from tests.dledger.test_group import elected_master, member_pid
from tests.support.bounded import Daemon
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

PEERS = {"n0": "127.0.0.1:1", "n1": f"127.0.0.1:{free_port()}", "n2": "127.0.0.1:3"}
BOOT = boot_id()

pytestmark = pytest.mark.skipif(BOOT is None, reason="no boot id (not Linux): no promise is kept")


async def _member(directory: Path) -> DLedgerServer:
    # (voteWhenEmptied: a new member of an empty group that follows a leader at once)
    settings = DLedgerSettings("g", "n1", dict(PEERS), str(directory), Timings(), vote_when_emptied=True)
    server = DLedgerServer(settings, DLedgerLog(str(directory)))
    await server.start()
    return server


async def _stop(server: DLedgerServer) -> None:
    await server.stop()
    server.log.close()


def _beat(term: int = 0) -> RemotingCommand:
    bean = HeartBeatRequest(
        group="g", leader_id="n0", local_id="n0", remote_id="n1", term=term, mqctl_lease=True
    )
    return RemotingCommand.request(int(DLedgerRequestCode.HEART_BEAT), body=bean.encode())


def _vote(candidate: str, term: int) -> RemotingCommand:
    bean = VoteRequest(group="g", leader_id=candidate, local_id=candidate, remote_id="n1", term=term)
    bean.ledger_end_index, bean.ledger_end_term = -1, -1
    return RemotingCommand.request(int(DLedgerRequestCode.VOTE), body=bean.encode())


async def _ask(request: RemotingCommand, addr: str = PEERS["n1"]) -> bytes:
    """`request` sent to the member at `addr` from a peer's host (loopback), its answer's body."""
    client = RemotingClient(local_host="127.0.0.1")
    try:
        return (await client.invoke(addr, request, 5.0)).body
    finally:
        await client.close()


async def test_a_heartbeat_is_answered_once_its_promise_is_kept_and_a_restart_keeps_it(
    tmp_path: Path,
) -> None:
    """The first acknowledgement is answered once its promise is on disk; the next ones, covered by it, write
    nothing. Started again, the member refuses a candidate but its leader until the deadline kept."""
    server = await _member(tmp_path)
    timings = server.settings.timings
    timeout = max(2, timings.max_heart_beat_leak) * timings.heart_beat_time_interval_ms
    try:
        assert HeartBeatResponse.decode(await _ask(_beat())).code == DLedgerResponseCode.SUCCESS
        kept = load_heard(str(tmp_path))
        assert kept is not None and kept[:4] == (BOOT, "g", "n1", "n0")
        left = kept[4] - boot_ms()
        assert timeout < left <= timeout + timeout // 2 + 2, left
        assert HeartBeatResponse.decode(await _ask(_beat())).code == DLedgerResponseCode.SUCCESS
        assert load_heard(str(tmp_path)) == kept
    finally:
        await _stop(server)
    again = await _member(tmp_path)
    try:
        remembered = again.node._remembered
        assert remembered is not None and remembered[0] == "n0"
        assert timeout - 1000 < remembered[1] - now_ms() <= timeout + timeout // 2 + 2
        answer = VoteResponse.decode(await _ask(_vote("n2", 1)))
        assert (answer.vote_result, answer.term) == (VoteResult.REJECT_ALREADY_HAS_LEADER, 0)
    finally:
        await _stop(again)


@pytest.mark.parametrize(
    "record",
    [
        encode_heard("another-boot", "g", "n1", "n0", 10**15),  # (a reboot outlasts any lease)
        encode_heard(BOOT or "", "g", "n1", "n0", 10**15)[:40],  # (cut short)
        encode_heard(BOOT or "", "g", "n1", "n0", 10**15).replace(b"n0", b"n2"),  # (damaged)
        encode_heard(BOOT or "", "g", "n1", "n0", 0),  # (over)
        encode_heard(BOOT or "", "other", "n1", "n0", 10**15),  # (a directory another group used)
        encode_heard(BOOT or "", "g", "n2", "n0", 10**15),  # (another member's)
        encode_heard(BOOT or "", "g", "n1", "n9", 10**15),  # (dLegerPeers changed: no such leader now)
    ],
    ids=["another-boot", "short", "damaged", "over", "another-group", "another-member", "not-a-peer"],
)
async def test_a_member_whose_kept_promise_is_of_another_boot_or_damaged_waits_for_nothing(
    tmp_path: Path, record: bytes
) -> None:
    (tmp_path / HEARD_FILE).write_bytes(record)
    server = await _member(tmp_path)
    try:
        assert server.node._remembered is None
        answer = VoteResponse.decode(await _ask(_vote("n2", 1)))
        assert (
            answer.vote_result is VoteResult.REJECT_TERM_NOT_READY
        )  # (it moves to the term: DLedger's answer)
    finally:
        await _stop(server)


async def test_a_promise_that_cannot_be_kept_is_said_and_the_heartbeat_acknowledged_all_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Refusing them would cost the group its leader, for a file that matters only across a restart."""
    os.makedirs(tmp_path / HEARD_FILE)  # (nothing can be written there)
    server = await _member(tmp_path)
    try:
        with caplog.at_level("WARNING"):
            assert HeartBeatResponse.decode(await _ask(_beat())).code == DLedgerResponseCode.SUCCESS
        assert "cannot keep until when it refuses candidates" in caplog.text
        assert server.node._kept[0] == ""  # (nothing kept: the next acknowledgement tries again)
    finally:
        await _stop(server)


@contextlib.contextmanager
def _stalled_disk(directory: Path) -> Iterator[None]:
    """The member's `heard` file a FIFO nobody reads: its writer blocks (a hung device) until released."""
    fifo = directory / HEARD_FILE
    os.mkfifo(fifo)
    try:
        yield
    finally:  # (released: the write ends, refused by the FIFO, and its thread with it)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        time.sleep(0.2)
        os.close(reader)


async def test_a_heartbeat_is_answered_all_the_same_while_its_promise_s_write_is_stalled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk stalled longer than the follower timeout must not cost the leader its quorum: the
    acknowledgement waits `keep_wait_ms` at most, then goes out as after a failed write, and says so."""
    server = await _member(tmp_path)
    try:
        with _stalled_disk(tmp_path), caplog.at_level("WARNING"):
            assert HeartBeatResponse.decode(await _ask(_beat())).code == DLedgerResponseCode.SUCCESS
            assert server._keeper is not None  # (still writing)
            assert "before it kept until when it refuses candidates" in caplog.text
            assert server.node._kept[0] == ""
    finally:
        await _stop(server)


async def test_a_member_stopping_during_a_write_cancels_the_acknowledgements_waiting_for_it(
    tmp_path: Path,
) -> None:
    """Neither answered nor left pending: the member stops."""
    server = await _member(tmp_path)
    try:
        with _stalled_disk(tmp_path):
            waiting = server._kept(("n0", now_ms() + 9000))
            await wait_until(lambda: not server._keeping, 5)  # (its write began)
            await server.stop()
            assert waiting.cancelled()
            assert server._kept(("n0", now_ms() + 9000)).cancelled()  # (nothing written once stopped)
    finally:
        await _stop(server)


@pytest.mark.pure_python
async def test_a_writer_that_fails_otherwise_still_has_the_heartbeat_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not an OSError (a shut-down executor, MemoryError): answered as after a failed write, and said."""

    def broken(directory: str, record: bytes) -> None:
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(server_module, "keep_heard", broken)
    server = await _member(tmp_path)
    try:
        with caplog.at_level("WARNING"):
            assert HeartBeatResponse.decode(await _ask(_beat())).code == DLedgerResponseCode.SUCCESS
        await wait_until(lambda: server._keeper is None, 5)
        assert "its writer failed: RuntimeError" in caplog.text
        assert not server._keeping and server.node._kept[0] == ""
    finally:
        await _stop(server)


#: Long heartbeats: a follower's promise runs for seconds more than a member takes to start again.
SLOW_BEATS = "4000"


@pytest.mark.slow
async def test_a_follower_killed_and_started_again_refuses_a_candidate_until_its_kept_deadline(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`up --dledger 3`: a follower is SIGKILLed, and the leader and the other follower with it (nothing it
    could hear again), then it is started again from its broker.conf: once its restart check is done, a
    candidate is refused (its term unchanged) until the deadline it kept, and voted for after it. Its
    file removed before a second restart, it votes at once: the file is what it remembered."""
    ns_port = free_port()
    data = tmp_path / "data"
    env = {**cli_env, "MQCTL_HEART_BEAT_TIME_INTERVAL_MS": SLOW_BEATS}
    async with mqctl_up(data, env, ns_port, "--dledger", "3", "--broker-port", "0", "--no-metrics"):
        client = RemotingClient()
        try:
            leader_addr = await elected_master(client, f"127.0.0.1:{ns_port}")
            confs = {}
            for conf in sorted(data.glob("store-broker-a-n*/broker.conf")):
                keys = parse_properties(conf.read_text())
                confs[f"127.0.0.1:{keys['listenPort']}"] = (conf, keys)
            leader_id = confs[leader_addr][1]["dLegerSelfId"]
            follower, other = (a for a in confs if a != leader_addr)
            conf, keys = confs[follower]
            self_id, candidate = keys["dLegerSelfId"], confs[other][1]["dLegerSelfId"]
            channel = dict(p.split("-", 1) for p in keys["dLegerPeers"].split(";"))[self_id]
            heard = next(conf.parent.rglob("dledger-*")) / HEARD_FILE

            def kept() -> bool:
                record = load_heard(str(heard.parent))
                return record is not None and (record[0], record[3]) == (BOOT, leader_id)

            await wait_until(kept, 60)
            # caught up before the kill, or its restart abstains until a leader (none is left) pushes it
            await wait_until(lambda: _checked(client, follower), 60)
            pids = [member_pid(data, a) for a in (follower, leader_addr, other)]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            record = load_heard(str(heard.parent))
            assert record is not None
            deadline = record[4]
            argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
            member = Daemon(argv, env, conf.parent / "restarted.log")
            member.start()
            try:
                await member.serving(lambda: _checked(client, follower), 60)
                term = int(await _info(client, follower, "dledgerTerm"))
                assert boot_ms() < deadline - 500, "started again too late to be asked before its deadline"
                answer = VoteResponse.decode(await _ask(_vote_for(candidate, self_id, term + 1), channel))
                assert answer.vote_result in (
                    VoteResult.REJECT_ALREADY_HAS_LEADER,
                    VoteResult.REJECT_ALREADY_VOTED,
                )
                assert answer.term == term and int(await _info(client, follower, "dledgerTerm")) == term
                await asyncio.sleep(max(0.0, (deadline - boot_ms()) / 1000) + 0.2)
                assert await _votes(client, follower, channel, candidate, self_id)
                said = member.log_tail(100_000)
                assert f"restarted within its promise to leader {leader_id}" in said
                assert f"refuses {candidate} in term {term + 1}" in said
                member.kill()
                heard.unlink()
                member.start()
                await member.serving(lambda: _checked(client, follower), 60)
                assert await _votes(client, follower, channel, candidate, self_id)
            finally:
                await asyncio.to_thread(member.stop)
        finally:
            await client.close()


async def _info(client: RemotingClient, addr: str, key: str) -> str:
    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.loads((await client.invoke(addr, request, timeout=5.0)).body).table[key]


async def _checked(client: RemotingClient, addr: str) -> bool:
    """The member answers and its restart check is done (it abstains no more)."""
    try:
        return await _info(client, addr, "dledgerAbstains") == ""
    except Exception:  # (not listening yet)
        return False


def _vote_for(candidate: str, member: str, term: int) -> RemotingCommand:
    """`candidate`'s vote request to `member` in `term`, its log no shorter than any (its last entry's term
    no later than `term`)."""
    bean = VoteRequest(group="broker-a", leader_id=candidate, local_id=candidate, remote_id=member, term=term)
    bean.ledger_end_index, bean.ledger_end_term = 10**9, term
    return RemotingCommand.request(int(DLedgerRequestCode.VOTE), body=bean.encode())


async def _votes(client: RemotingClient, addr: str, channel: str, candidate: str, member: str) -> bool:
    """Whether the member gives `candidate` its vote in the term past its own (asked again as a candidate
    is: the first answer moves it there)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        term = int(await _info(client, addr, "dledgerTerm"))
        answer = VoteResponse.decode(await _ask(_vote_for(candidate, member, term + 1), channel))
        if answer.vote_result is VoteResult.REJECT_TERM_NOT_READY:
            answer = VoteResponse.decode(await _ask(_vote_for(candidate, member, term + 1), channel))
        if answer.vote_result is VoteResult.ACCEPT:
            return True
        assert answer.vote_result not in (VoteResult.REJECT_ALREADY_HAS_LEADER,), answer
        await asyncio.sleep(0.2)  # (it moved its own term meanwhile: asked in the next)
    return False

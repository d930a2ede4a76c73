"""``broker ha transfer`` against a real DLedger group (one member, so it leads at once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli
from tests.support.ports import free_port
from tests.support.waiting import wait_for


@pytest.fixture
def dledger_one(tmp_path: Path) -> Iterator[LocalCluster]:
    keys = {
        "enable_dleger_commit_log": True,
        "dleger_group": "broker-a",
        "dleger_peers": f"n0-127.0.0.1:{free_port()}",
        "dleger_self_id": "n0",
        "metrics_enable": False,
    }
    with local_cluster(tmp_path, **keys) as cluster:
        yield cluster


def test_transfer_to_the_member_that_already_leads_changes_nothing_and_succeeds(
    cli: RunCli, dledger_one: LocalCluster
) -> None:
    """A script that says 'n0 leads' must not fail because n0 already does; DLedger itself answers that
    request UNKNOWN_MEMBER (a leader is not its own peer), which read as a typo in --to."""
    ns = dledger_one.namesrv_addr

    def leads() -> bool:
        rows = cli("broker", "ha", "status", "-n", ns, "-o", "json").json()
        # each row names its member as --to and the peers column do (no row said which member it was)
        return [(r["member"], r["raft_role"]) for r in rows] == [("n0", "LEADER")]

    wait_for(leads, "n0 to lead")
    result = cli("broker", "ha", "transfer", "--to", "n0", "-n", ns, "-o", "json")
    assert result.code == 0, result.stderr
    answer = result.json()
    assert (answer["from_id"], answer["to_id"], answer["result"]) == ("n0", "n0", "ALREADY_LEADER")
    assert leads()


def test_a_transfer_refused_for_a_member_down_says_so() -> None:
    """'leadership transfer n2 -> n0 refused: NETWORK_ERROR' (n0 killed) named DLedger's code alone: the
    operator was left to guess that the leader could not reach n0."""
    from daemon.dledger.protocol import DLedgerResponseCode
    from mqctl.services.ha import _refusal_hint

    down = _refusal_hint(DLedgerResponseCode.NETWORK_ERROR, "n0", "127.0.0.1:40912")
    assert down is not None and "could not reach n0 (DLedger port 127.0.0.1:40912)" in down
    assert "ha status" in down
    assert "behind" in (_refusal_hint(DLedgerResponseCode.FALL_BEHIND_TOO_MUCH, "n1", "h:1") or "")
    assert _refusal_hint(DLedgerResponseCode.UNKNOWN_GROUP, "n1", "h:1") is None


def test_a_transfer_the_transferee_declined_says_why_it_may() -> None:
    """TAKE_LEADERSHIP_FAILED alone did not say that the transferee abstains (its store lost, not caught up
    yet), holds a damaged entry or cannot write: the transfer to a member that abstains was refused with
    nothing to go on (a Jepsen schedule transferred to an emptied member while it caught up)."""
    from daemon.dledger.protocol import DLedgerResponseCode
    from mqctl.services.ha import _refusal_hint

    hint = _refusal_hint(DLedgerResponseCode.TAKE_LEADERSHIP_FAILED, "n2", "h:1") or ""
    assert "n2 may not lead now: it abstains from elections" in hint
    assert "ha status" in hint


async def test_a_leader_lost_mid_transfer_is_an_mqctl_error_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader's connection closing before its answer escaped as the transport's RemotingConnectError:
    the service's callers (scripts, the nemesis) got no exit code and no word of what to check."""
    from daemon.remoting.errors import RemotingConnectError
    from mqctl.errors import ConnectError
    from mqctl.services import ha
    from mqctl.services.cluster import BrokerRow

    class Client:
        async def invoke(self, addr: str, command: object, timeout: float) -> object:
            raise RemotingConnectError(addr, "connection closed before the answer")

    class Admin:
        timeout = 5.0
        client = Client()

        async def broker_runtime_info(self, addr: str) -> dict[str, str]:
            peers = "n0-127.0.0.1:1;n1-127.0.0.1:2"
            return {
                "dledgerRole": "LEADER",
                "dledgerPeerAddrs": peers,
                "dledgerSelfId": "n0",
                "dledgerTerm": "3",
            }

    async def brokers(admin: object, cluster: str | None) -> list[BrokerRow]:
        return [BrokerRow("C", "broker-a", 0, "127.0.0.1:10911")]

    monkeypatch.setattr(ha, "brokers", brokers)
    with pytest.raises(ConnectError) as caught:
        await ha.transfer(Admin(), "n1", force=True)  # type: ignore[arg-type]
    assert caught.value.message.startswith("leadership transfer n0 -> n1: no answer from the leader: ")
    assert caught.value.hint is not None and "ha status" in caught.value.hint

"""The peer gate's decisions, without sockets: which hosts connect, which sender ids a request may name."""

from __future__ import annotations

from daemon.dledger.gate import PeerGate
from daemon.dledger.protocol import HeartBeatRequest, LeadershipTransferRequest, MetadataRequest, VoteRequest

PEERS = {"n0": "127.0.0.1:1", "n1": "127.0.0.2:2", "n2": "[::1]:3"}


def gate(self_id: str = "n0", peers: dict[str, str] = PEERS) -> PeerGate:
    g = PeerGate(self_id, peers)
    g.resolve()
    return g


def test_connections_only_from_members_hosts() -> None:
    g = gate()
    assert g.admits("127.0.0.1") and g.admits("127.0.0.2") and g.admits("::1")
    assert not g.admits("127.0.0.3") and not g.admits("10.0.0.1") and not g.admits("")
    assert g.refused == 3
    assert not g.beyond_loopback
    assert gate(peers={**PEERS, "n3": "10.1.2.3:4"}).beyond_loopback


def test_a_sender_must_be_another_member_on_the_connecting_host() -> None:
    g = gate()
    assert (
        g.refusal(VoteRequest(group="g", leader_id="n1", local_id="n1", remote_id="n0"), "127.0.0.2") is None
    )
    assert g.refusal(HeartBeatRequest(leader_id="n2", local_id="n2"), "::1") is None
    refused = {
        "whose host in dLegerPeers is 127.0.0.2": (VoteRequest(leader_id="n1"), "127.0.0.1"),
        "this member itself": (VoteRequest(leader_id="n0"), "127.0.0.1"),
        "which dLegerPeers does not list": (HeartBeatRequest(leader_id="n1", local_id="x"), "127.0.0.2"),
        "whose host in dLegerPeers is ::1": (
            LeadershipTransferRequest(remote_id="n0", transfer_id="n2", transferee_id="n0"),
            "127.0.0.1",
        ),
    }
    for why, (request, ip) in refused.items():
        remark = g.refusal(request, ip)
        assert remark is not None and why in remark and ip in remark, (why, remark)
    # an admin's transfer to the leader names no sender; METADATA none either
    admin = LeadershipTransferRequest(remote_id="n0", transfer_id="n0", transferee_id="n1", term=3)
    assert g.refusal(admin, "127.0.0.2") is None
    assert g.refusal(MetadataRequest(group="g"), "127.0.0.1") is None

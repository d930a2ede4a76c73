"""The address a broker listening on every interface advertises: the default route's source address when
it is an interface's, else 4.9.8's `RemotingUtil.getLocalAddress` rule over the kernel's order of the
interfaces, never the host name's DNS entry (which often maps to loopback)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from daemon.broker import config as broker_config
from daemon.broker.config import BrokerConfig, Interface, pick_local_address
from daemon.broker.ha import split_addr
from daemon.grpc.convert import endpoints
from daemon.remoting.codes import ResponseCode
from tests.daemons import handle, local_cluster


def _ifs(*pairs: str, bridge: str = "") -> list[Interface]:
    return [Interface(name, addr, bridge=name == bridge) for name, addr in (p.split("=") for p in pairs)]


def test_the_choice_follows_getlocaladdress_rule_in_kernel_order() -> None:
    """4.9.8's rule over the kernel's order; Java lists the interfaces in another order (OpenJDK puts each
    new one at the head of its list), so where several qualify a Java broker may pick another."""
    assert pick_local_address(_ifs("lo=127.0.0.1", "eth0=10.0.0.5")) == "10.0.0.5"
    # 192.168 is passed over for another IPv4 address, and taken (the last one in kernel order) when nothing
    # else is left: a Java broker, whose list is in another order, may take the first
    assert pick_local_address(_ifs("eth0=192.168.1.4", "eth1=172.16.0.9")) == "172.16.0.9"
    assert pick_local_address(_ifs("eth0=192.168.1.4", "eth1=192.168.7.7")) == "192.168.7.7"
    # IPv4 before IPv6, whatever the order
    assert pick_local_address(_ifs("eth0=fd00::2", "eth1=10.9.9.9")) == "10.9.9.9"
    assert pick_local_address(_ifs("lo=::1", "eth0=fe80::1%eth0", "eth0=fd00::2")) == "[fd00::2]"
    # a bridge's addresses are skipped
    assert (
        pick_local_address(_ifs("docker0=172.17.0.1", "eth0=192.168.0.3", bridge="docker0")) == "192.168.0.3"
    )
    assert pick_local_address(_ifs("lo=127.0.0.1", "lo=::1")) is None
    assert pick_local_address([]) is None


def test_the_default_routes_source_is_preferred_and_link_local_skipped() -> None:
    """A Kubernetes node's nodelocaldns (169.254.20.10), its kube-ipvs0 service IP, a tailscale or VPN
    address and an overlay's were advertised before the LAN address the default route leaves from."""
    lan = "eth0=192.168.1.10"
    assert pick_local_address(_ifs("lo=127.0.0.1", lan, "nodelocaldns=169.254.20.10")) == "192.168.1.10"
    routed = "192.168.1.10"
    for other in (
        "kube-ipvs0=10.96.0.1",
        "tailscale0=100.101.102.103",
        "flannel.1=10.244.0.0",
        "tun0=10.8.0.2",
    ):
        assert pick_local_address(_ifs("lo=127.0.0.1", lan, other), routed) == routed
        assert pick_local_address(_ifs("lo=127.0.0.1", lan, other)) == other.split("=")[1]  # no route known
    # a route's source that is no candidate (loopback, a bridge's, not an interface's) is passed over
    assert pick_local_address(_ifs("eth0=10.0.0.5", "tun0=10.8.0.2"), "127.0.0.1") == "10.0.0.5"
    assert pick_local_address(
        _ifs("docker0=172.17.0.1", "eth0=10.0.0.5", bridge="docker0"), "172.17.0.1"
    ) == ("10.0.0.5")
    assert pick_local_address(_ifs("lo=::1", "eth0=fd00::2", "eth1=fd00::9"), "fd00::9") == "[fd00::9]"
    # a bridge's alias label is the bridge's
    assert pick_local_address(
        _ifs("br0=192.168.122.1", "br0:1=10.1.1.1", "eth0=192.168.0.3", bridge="br0")
    ) == ("192.168.0.3")


def test_a_wildcard_listener_registers_an_interface_address_not_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the host name maps to 127.0.0.1 (/etc/hosts), the broker registered 127.0.0.1."""
    monkeypatch.setattr(broker_config, "host_interfaces", lambda: _ifs("lo=127.0.0.1", "eth0=10.20.30.40"))
    monkeypatch.setattr("socket.gethostname", lambda: "localhost")
    config = BrokerConfig(listen_host="0.0.0.0", broker_ip1="")
    assert config.broker_ip1 == "10.20.30.40"
    assert config.ha_server_addr.startswith("10.20.30.40:")


def test_only_loopback_on_a_wildcard_listener_warns_naming_brokerip1(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(broker_config, "host_interfaces", lambda: _ifs("lo=127.0.0.1"))
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig(listen_host="0.0.0.0", broker_ip1="")
    assert config.broker_ip1 == "127.0.0.1"
    assert any("brokerIP1" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_this_hosts_interfaces_are_listed() -> None:
    """The real lookup answers without DNS: at least loopback where there is /sys/class/net."""
    found = broker_config.host_interfaces()
    assert all(isinstance(i, Interface) and i.address for i in found)
    if Path("/sys/class/net/lo").exists():
        assert any(i.address in ("127.0.0.1", "::1") for i in found), found


def test_an_ipv6_address_is_bracketed_where_registered_and_bare_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4.9.8 registers ``[fd00::2]:port``; the store host, gRPC endpoints and own-address checks take the
    bare IP: the bracketed one crashed the store's host encoding at start."""
    monkeypatch.setattr(broker_config, "host_interfaces", lambda: _ifs("lo=::1", "eth0=fd00::2"))
    picked = BrokerConfig(listen_host="::", broker_ip1="", listen_port=10911)
    given = BrokerConfig(broker_ip1="[fd00::2]", listen_port=10911)
    for config in (picked, given):
        assert (config.broker_ip1, config.ip1) == ("[fd00::2]", "fd00::2")
        assert config.broker_addr == "[fd00::2]:10911"
        assert config.ha_server_addr == "[fd00::2]:10912"
        assert endpoints(config.ip1, 8081).scheme == pb.IPv6
    assert given.listen_host == "::"  # reached over IPv6: not the IPv4 wildcard
    assert BrokerConfig(broker_ip1="[::1]").listen_host == "::1"
    assert BrokerConfig(broker_ip1="10.1.2.3").ip1 == "10.1.2.3"


def test_a_wildcard_advertises_an_address_of_the_family_it_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """0.0.0.0 serves IPv4 alone: an IPv6-only host's address registered there reaches nothing."""
    monkeypatch.setattr(
        broker_config, "host_interfaces", lambda: _ifs("lo=127.0.0.1", "lo=::1", "eth0=fd00::2")
    )
    with caplog.at_level(logging.WARNING):
        assert BrokerConfig(listen_host="0.0.0.0", broker_ip1="").broker_ip1 == "127.0.0.1"
    assert any("listenHost=::" in r.getMessage() for r in caplog.records)
    both = _ifs("lo=127.0.0.1", "eth0=10.1.1.1", "eth0=fd00::2")
    monkeypatch.setattr(broker_config, "host_interfaces", lambda: both)
    assert BrokerConfig(listen_host="::", broker_ip1="").broker_ip1 == "[fd00::2]"
    assert BrokerConfig(listen_host="0.0.0.0", broker_ip1="").broker_ip1 == "10.1.1.1"


def test_an_ipv6_only_host_starts_a_wildcard_broker_and_stores_its_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker on :: whose host has only IPv6 beyond loopback: it raised ValueError ('[fd00::2]' does
    not appear to be an IPv4 or IPv6 address) opening its store, a traceback at start."""
    if not socket.has_ipv6 or not _binds("::1"):
        pytest.skip("no IPv6 loopback here")
    monkeypatch.setattr(broker_config, "host_interfaces", lambda: _ifs("lo=::1", "eth0=fd00::2"))
    with local_cluster(tmp_path, listen_host="::", broker_ip1="", grpc_listen_port=0) as cluster:
        assert cluster.broker.config.broker_addr.startswith("[fd00::2]:")
        client = handle(cluster)
        client.addr = f"[::1]:{cluster.broker.server.port}"
        cluster.loop.run(client.create_topic("Six", 1))
        sent = cluster.loop.run(client.send("Six", b"hello"))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert sent.ext_fields["msgId"].upper().startswith("FD00" + "0" * 26 + "02")


def _binds(host: str) -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("addr", "split"),
    [
        ("127.0.0.1:10912", ("127.0.0.1", 10912)),
        ("[::1]:10912", ("::1", 10912)),
        ("[fd00::3]:1", ("fd00::3", 1)),
    ],
)
def test_an_ha_address_splits_into_a_host_a_socket_takes(addr: str, split: tuple[str, int]) -> None:
    """A master registers an IPv6 HA address bracketed (as 4.9.8 does): the slave connects to, and the
    master's HA gate compares, the bare host."""
    assert split_addr(addr) == split

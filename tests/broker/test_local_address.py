"""The address a broker listening on every interface advertises: 4.9.8's `RemotingUtil.getLocalAddress`
order over the interfaces, never the host name's DNS entry (which often maps to loopback)."""

from __future__ import annotations

import logging

import pytest

from daemon.broker import config as broker_config
from daemon.broker.config import BrokerConfig, Interface, pick_local_address


def _ifs(*pairs: str, bridge: str = "") -> list[Interface]:
    return [Interface(name, addr, bridge=name == bridge) for name, addr in (p.split("=") for p in pairs)]


def test_the_choice_follows_getlocaladdress_order() -> None:
    assert pick_local_address(_ifs("lo=127.0.0.1", "eth0=10.0.0.5")) == "10.0.0.5"
    # 192.168 is passed over for another IPv4 address, and taken (the last one) when nothing else is left
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

"""GET_BROKER_CONFIG / GET_NAMESRV_CONFIG answer RocketMQ 4.9.8's key sets (what mqadmin getBrokerConfig and
getNamesrvConfig print), and mqctl still reads its own keys."""

from __future__ import annotations

from daemon.broker.config import BrokerConfig
from daemon.config import ALL_KEYS_FIELD, parse_properties
from daemon.namesrv.config import NamesrvConfig
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from mqctl.admin.client import Admin
from tests.support.broker import ClusterHandle

#: Keys of ours a 4.9.8 broker or NameServer does not have (a sample: every one is checked by set equality).
OURS = ("metricsPort", "listenHost", "protectedMode", "brokerConfigPath", "tls.server.mode", "aclFilePath")


async def _config(cluster: ClusterHandle, addr: str, code: int, ext: dict[str, str]) -> dict[str, str]:
    request = RemotingCommand.request(code, ext, version=409)
    response = await cluster.client.invoke(addr, request, 5.0)
    return parse_properties(response.body.decode())


async def test_broker_config_has_4_9_8_keys_and_derived_values(cluster: ClusterHandle) -> None:
    got = await _config(cluster, cluster.addr, RequestCode.GET_BROKER_CONFIG, {})
    assert set(got) == set(BrokerConfig.ROCKETMQ_DEFAULTS)
    assert not set(OURS) & set(got)
    assert got["brokerIP2"] == got["brokerIP1"] == "127.0.0.1"  # 4.9.8 derives brokerIP2, never empty
    assert got["rocketmqHome"] != ""
    assert got["checkCRCOnRecover"] == "true" and "checkCrcOnRecover" not in got
    assert {"enableDetailStat", "isolateLogEnable", "configBlackList"} <= set(got)
    everything = await _config(cluster, cluster.addr, RequestCode.GET_BROKER_CONFIG, {ALL_KEYS_FIELD: "true"})
    assert {"metricsPort", "listenHost", "diskSpaceCleanForciblyRatio"} <= set(everything)


async def test_mqctl_still_reads_its_own_broker_keys(cluster: ClusterHandle) -> None:
    async with Admin([cluster.namesrv_addr]) as admin:
        got = await admin.broker_config(cluster.addr)
    assert got["listenHost"] == "127.0.0.1" and "diskSpaceWarningLevelRatio" in got


async def test_namesrv_config_has_4_9_8_keys(cluster: ClusterHandle) -> None:
    got = await _config(cluster, cluster.namesrv_addr, RequestCode.GET_NAMESRV_CONFIG, {})
    assert set(got) == set(NamesrvConfig.ROCKETMQ_DEFAULTS)
    assert got["configBlackList"] == "configBlackList;configStorePath;kvConfigPath" and got["rocketmqHome"]
    everything = await _config(
        cluster, cluster.namesrv_addr, RequestCode.GET_NAMESRV_CONFIG, {ALL_KEYS_FIELD: "true"}
    )
    assert {"listenHost", "kvConfigMaxValueBytes"} <= set(everything)

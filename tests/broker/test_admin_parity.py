"""4.9.8 admin surface, driven as the Java client sends it (version 409, string extFields):
VIEW_BROKER_STATS_DATA (315), GET_BROKER_RUNTIME_INFO's keys (28), GET_BROKER_CONSUME_STATS (317),
the full config key set (26, 25), and a broker that opens its port only once its store is recovered."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from daemon.broker.broker import Broker
from daemon.broker.clean import WRITE_REFUSED_RUNTIME_KEY
from daemon.broker.config import BrokerConfig, load_broker_config
from daemon.broker.ha import HA_RUNTIME_KEYS
from daemon.broker.headers import ConsumerSendMsgBackRequestHeader
from daemon.broker.loopwatch import CLOCK_RUNTIME_KEY, LOOP_RUNTIME_KEYS
from daemon.broker.pop import POP_RUNTIME_KEYS
from daemon.broker.stats import GROUP_GET_NUMS, SAMPLE_PERIOD, TOPIC_PUT_NUMS, BrokerStats
from daemon.broker.timer import TIMER_RUNTIME_KEYS
from daemon.config import INERT_HEADER, parse_properties, to_properties
from daemon.namesrv.config import NamesrvConfig
from daemon.remoting.bodies import KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode, Version
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.engine import DefaultMessageStore
from tests.support.broker import BrokerHandle, broker_config
from tests.support.golden import golden_response_body

#: Every GET_BROKER_RUNTIME_INFO key of a 4.9.8 master with one commit-log path and no delayed messages
#: (AdminBrokerProcessor.prepareRuntimeInfo + DefaultMessageStore/StoreStatsService.getRuntimeInfo):
#: the 46 keys a 4.9.3 broker answers, plus 4.9.8's putLatency99/999, plus `commitLogDiskRatio_<path>`.
RUNTIME_KEYS_498 = {
    "brokerVersionDesc", "brokerVersion", "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning", "msgGetTotalTodayNow",
    "sendThreadPoolQueueSize", "sendThreadPoolQueueCapacity", "pullThreadPoolQueueSize",
    "pullThreadPoolQueueCapacity", "queryThreadPoolQueueSize", "queryThreadPoolQueueCapacity",
    "EndTransactionQueueSize", "EndTransactionThreadPoolQueueCapacity", "dispatchBehindBytes",
    "pageCacheLockTimeMills", "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "earliestMessageTimeStamp", "startAcceptSendRequestTimeStamp", "remainTransientStoreBufferNumbs",
    "remainHowManyDataToFlush", "commitLogDirCapacity", "bootTimestamp", "runtime", "putMessageEntireTimeMax",
    "putMessageTimesTotal", "putMessageSizeTotal", "putMessageDistributeTime", "putMessageAverageSize",
    "putMessageFailedTimes", "dispatchMaxBuffer", "getMessageEntireTimeMax", "putTps", "getFoundTps",
    "getMissTps", "getTotalTps", "getTransferedTps", "putLatency99", "putLatency999", "commitLogDiskRatio",
    "consumeQueueDiskRatio", "commitLogMinOffset", "commitLogMaxOffset",
}  # fmt: skip


def golden_runtime_keys() -> set[str]:
    """The keys of the GET_BROKER_RUNTIME_INFO table a real 4.9.8 broker answered (the golden frames)."""
    return set(fastjson.loads(golden_response_body("28 GET_BROKER_RUNTIME_INFO"))["table"])


def test_the_runtime_key_list_is_the_recorded_brokers() -> None:
    path_key = "commitLogDiskRatio_<storePathRootDir>/commitlog"
    assert golden_runtime_keys() == RUNTIME_KEYS_498 | {path_key}


def java_request(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """What the 4.9.8 Java client sends: version 409, every extField a string."""
    return RemotingCommand.request(code, dict(ext or {}), body, version=int(Version.V4_9_8))


async def call(
    broker: BrokerHandle, code: int, ext: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    return await broker.client.invoke(broker.addr, java_request(code, ext, body), 5.0)


async def stats_data(broker: BrokerHandle, name: str, key: str) -> dict[str, dict[str, float]]:
    r = await call(broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return fastjson.loads(r.body)  # type: ignore[no-any-return]


async def test_view_broker_stats_data_counts_puts_gets_and_send_backs(broker: BrokerHandle) -> None:
    stored = [await broker.send("StatT", f"m{i}".encode()) for i in range(5)]
    assert all(r.code == ResponseCode.SUCCESS for r in stored)
    pulled = await broker.pull("StatG", "StatT", 0, 0, max_nums=3)
    assert pulled.code == ResponseCode.SUCCESS
    back = ConsumerSendMsgBackRequestHeader(0, "StatG", 0, origin_topic="StatT").to_ext_fields()
    assert (await call(broker, RequestCode.CONSUMER_SEND_MSG_BACK, dict(back))).code == ResponseCode.SUCCESS

    raw = await call(
        broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS, "statsKey": "StatT"}
    )
    assert re.fullmatch(  # BrokerStatsData as fastjson writes it: fields sorted, sum a long, the rest doubles
        rb'\{"statsDay":\{"avgpt":1\.0,"sum":5,"tps":[0-9.e-]+\},"statsHour":\{.*\},"statsMinute":\{.*\}\}',
        raw.body,
    )
    puts = await stats_data(broker, TOPIC_PUT_NUMS, "StatT")
    assert set(puts) == {"statsMinute", "statsHour", "statsDay"}
    for window in puts.values():
        assert set(window) == {"sum", "tps", "avgpt"}
        assert window["sum"] == 5 and window["avgpt"] == 1.0 and 0 < window["tps"] <= 5
    size = await stats_data(broker, "TOPIC_PUT_SIZE", "StatT")
    records = broker.broker.store.get_messages("x", "StatT", 0, 0, 32).messages
    assert size["statsDay"]["sum"] == sum(m.size for m in records)  # stored record sizes (Java's wroteBytes)
    gets = await stats_data(broker, GROUP_GET_NUMS, "StatT@StatG")
    assert gets["statsMinute"]["sum"] == 3 and gets["statsMinute"]["avgpt"] == 3.0
    assert (await stats_data(broker, "GROUP_GET_SIZE", "StatT@StatG"))["statsDay"]["sum"] == len(pulled.body)
    assert (await stats_data(broker, "BROKER_PUT_NUMS", "DefaultCluster"))["statsDay"]["sum"] == 6  # + retry
    assert (await stats_data(broker, "BROKER_GET_NUMS", "DefaultCluster"))["statsDay"]["sum"] == 3
    assert (await stats_data(broker, "SNDBCK_PUT_NUMS", "StatT@StatG"))["statsDay"]["sum"] == 1
    assert (await stats_data(broker, "GROUP_GET_LATENCY", "0@StatT@StatG"))["statsDay"]["sum"] >= 0

    missing = await call(
        broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS, "statsKey": "No"}
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == "The stats <TOPIC_PUT_NUMS> <No> not exist"

    broker.broker.offsets.commit_offset("StatG", "StatT", 0, 3)
    r = await call(broker, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    assert r.code == ResponseCode.SUCCESS
    body = fastjson.loads(r.body)
    assert body["brokerAddr"] == broker.addr and body["totalDiff"] == 2
    (entry,) = [e for e in body["consumeStatsList"] if "StatG" in e]
    assert entry["StatG"][0]["consumeTps"] > 0  # the GROUP_GET_NUMS minute rate
    ordered = fastjson.loads(
        (await call(broker, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "true"})).body
    )
    assert ordered["consumeStatsList"] == [] and ordered["totalDiff"] == 0


def test_stats_windows_forget_old_traffic_and_keep_the_day() -> None:
    clock = [1000.0]
    stats = BrokerStats("C")
    stats._now = lambda: clock[0]
    stats.on_put("T", 10, 1000)
    for _ in range(int(120 / SAMPLE_PERIOD)):  # two minutes of samples without traffic
        clock[0] += SAMPLE_PERIOD
        stats.sample()
    stats.on_put("T", 2, 200)
    data = stats.view(TOPIC_PUT_NUMS, "T")
    assert data is not None
    assert data["statsMinute"]["sum"] == 2  # the minute window has moved past the first put
    assert data["statsMinute"]["tps"] == pytest.approx(2 / 60)
    assert data["statsHour"]["sum"] == 12 and data["statsDay"]["sum"] == 12
    assert data["statsDay"]["avgpt"] == 6.0  # 12 messages in 2 puts


async def test_runtime_info_has_every_498_key_with_real_values(broker: BrokerHandle) -> None:
    for i in range(20):
        assert (await broker.send("RtT", b"x" * (100 + i))).code == ResponseCode.SUCCESS
    assert (await broker.pull("RtG", "RtT", 0, 0)).code == ResponseCode.SUCCESS
    assert (await broker.pull("RtG", "RtT", 1, 0)).code == ResponseCode.PULL_NOT_FOUND
    r = await call(broker, RequestCode.GET_BROKER_RUNTIME_INFO)
    table = KVTable.loads(r.body).table
    store_dir = broker.broker.config.commit_log_dir
    # no more, no fewer, but for mqctl's replication, loop, POP in flight, timer state and clock
    ours = HA_RUNTIME_KEYS | LOOP_RUNTIME_KEYS | POP_RUNTIME_KEYS | TIMER_RUNTIME_KEYS
    ours |= {CLOCK_RUNTIME_KEY, WRITE_REFUSED_RUNTIME_KEY}
    assert set(table) - ours == RUNTIME_KEYS_498 | {f"commitLogDiskRatio_{store_dir}"}
    assert abs(int(table[CLOCK_RUNTIME_KEY]) - time.time() * 1000) < 3_600_000  # the wall clock, in ms
    assert table["brokerRole"] == "ASYNC_MASTER"
    assert table["putMessageTimesTotal"] == "20" == table["msgPutTotalTodayNow"]
    # a fresh store holds exactly these 20 records: the stored size adds up to the commit log's end
    assert int(table["putMessageSizeTotal"]) == int(table["commitLogMaxOffset"])
    assert float(table["putMessageAverageSize"]) == pytest.approx(int(table["commitLogMaxOffset"]) / 20)
    assert table["putMessageFailedTimes"] == "0"
    distribution = dict(part.split(":") for part in table["putMessageDistributeTime"].split())
    assert next(iter(distribution)) == "[<=0ms]" and [*distribution][-1] == "[10s~]"
    assert sum(int(n) for n in distribution.values()) == 20
    p99, p999 = float(table["putLatency99"]), float(table["putLatency999"])
    assert 0 < p99 <= p999 <= int(table["putMessageEntireTimeMax"]) + 1
    assert table["msgGetTotalTodayNow"] == "20"
    assert all(len(table[k].split(" ")) == 3 for k in ("putTps", "getFoundTps", "getMissTps", "getTotalTps"))
    assert float(table["getFoundTps"].split()[0]) > 0 and float(table["getMissTps"].split()[0]) > 0
    assert (
        table["sendThreadPoolQueueCapacity"] == "10000" and table["pullThreadPoolQueueCapacity"] == "100000"
    )
    assert table["remainTransientStoreBufferNumbs"] == str(2**31 - 1)
    # Java's humanReadableByteCount texts, which exporters parse: "1.1 KiB", "Total : 252.0 GiB, Free : 66.6 GiB."
    assert re.fullmatch(r"\d+ B|\d+\.\d [KMGTPE]iB", table["remainHowManyDataToFlush"])
    assert re.fullmatch(
        r"Total : \d+\.\d [KMGTPE]iB, Free : \d+\.\d [KMGTPE]iB\.", table["commitLogDirCapacity"]
    )
    assert table[f"commitLogDiskRatio_{store_dir}"] == table["commitLogDiskRatio"]


@pytest.mark.slow
async def test_runtime_info_reports_schedule_offsets(broker: BrokerHandle) -> None:
    assert (await broker.send("DelayT", b"later", props={"DELAY": "1"})).code == ResponseCode.SUCCESS
    deadline = time.monotonic() + 10
    while True:
        table = KVTable.loads((await call(broker, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table
        if table.get("scheduleMessageOffset_1") == "1,1":  # delivered: delay offset 1 of max offset 1
            break
        assert time.monotonic() < deadline, table.get("scheduleMessageOffset_1")
        await asyncio.sleep(0.2)


async def test_broker_config_reports_rocketmq_keys_with_our_values(broker: BrokerHandle) -> None:
    r = await call(broker, RequestCode.GET_BROKER_CONFIG)
    props = parse_properties(r.body.decode())
    assert set(BrokerConfig.ROCKETMQ_DEFAULTS) <= set(props)
    assert props["listenPort"] == str(broker.broker.server.port)  # ours, not RocketMQ's default
    assert props["brokerName"] == "broker-a" and props["mappedFileSizeCommitLog"] == str(4 * 1024 * 1024)
    assert props["sendThreadPoolQueueCapacity"] == "10000" and props["useEpollNativeSelector"] == "false"
    assert INERT_HEADER not in r.body.decode()  # the wire text is plain key=value

    update = java_request(RequestCode.UPDATE_BROKER_CONFIG, body=b"waitTimeMillsInSendQueue=500\n")
    assert (await broker.client.invoke(broker.addr, update, 5.0)).code == ResponseCode.SUCCESS
    props = parse_properties((await call(broker, RequestCode.GET_BROKER_CONFIG)).body.decode())
    assert props["waitTimeMillsInSendQueue"] == "500"
    saved = parse_properties(Path(broker.broker.config.config_path).read_text())
    assert saved["waitTimeMillsInSendQueue"] == "500"  # kept for the next start like any other key


def test_a_real_brokers_config_loads_without_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        "sendMessageThreadPoolNums=16\nuseReentrantLockWhenPutMessage=true\ntransientStorePoolEnable=false\n"
        "serverWorkerThreads=16\nclientWorkerThreads=8\nwaitTimeMillsInSendQueue=1000\naclEnable=false\n"
        "noSuchRocketmqKey=1\n"
        # what a 4.9.8 broker writes back into its broker.conf after an UPDATE_BROKER_CONFIG
        "enableDetailStat=false\nisolateLogEnable=true\nconfigBlackList=configBlackList;brokerConfigPath\n"
        "warmMapedFileEnable=false\ncheckCRCOnRecover=false\n"
    )
    with caplog.at_level(logging.WARNING):
        config = load_broker_config(conf, {})
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "noSuchRocketmqKey" in warnings[0]
    assert config.inert_keys()["sendMessageThreadPoolNums"] == "16"
    assert config.inert_keys()["enableDetailStat"] == "false" and config.check_crc_on_recover is False
    printed = to_properties(config, mark_inert=True)
    ours, _, inert = printed.partition(INERT_HEADER + "\n")
    assert "brokerName=broker-a\n" in ours and "serverWorkerThreads=16\n" in inert
    assert "waitTimeMillsInSendQueue=1000\n" in inert and "brokerName=" not in inert
    assert "checkCRCOnRecover=false\n" in ours and "checkCrcOnRecover" not in printed


def test_namesrv_config_reports_rocketmq_keys() -> None:
    config = NamesrvConfig(data_dir=Path("/srv/ns"))
    props = parse_properties(to_properties(config))
    assert set(NamesrvConfig.ROCKETMQ_DEFAULTS) <= set(props)
    assert props["kvConfigPath"] == "/srv/ns/kvConfig.json"
    assert props["configStorePath"] == "/srv/ns/namesrv.properties"
    assert props["listenPort"] == "9876" and props["serverSocketBacklog"] == "1024"


class SlowRecovery:
    """A store whose recovery takes `delay` seconds (a big store's start-up, in miniature); it wraps the
    real store rather than subclassing it, since the store may be compiled (store/native.py)."""

    delay = 1.5

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    def open(self) -> None:
        time.sleep(self.delay)
        self._store.open()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


@pytest.mark.slow
async def test_port_opens_only_after_recovery_and_healthz_says_so(tmp_path: Path) -> None:
    config = broker_config(tmp_path / "store")
    broker = Broker(
        config,
        store_factory=lambda c: SlowRecovery(
            DefaultMessageStore(c.store_config(), store_host=(c.broker_ip1, c.listen_port))
        ),  # type: ignore[arg-type,return-value]
    )
    starting = asyncio.create_task(broker.start())
    try:
        while broker.server.port == 0 or broker.metrics_port is None:  # bound, not yet serving
            assert not starting.done()
            await asyncio.sleep(0.01)
        port = broker.server.port
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.to_thread(_healthz, broker.metrics_port) == (503, "starting")
        assert not starting.done()
        async with RemotingClient() as client:  # the first request after start answers at once
            await starting
            r = await client.invoke(
                f"127.0.0.1:{port}", java_request(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0
            )
            assert r.code == ResponseCode.SUCCESS
        assert await asyncio.to_thread(_healthz, broker.metrics_port) == (200, "serving")
    finally:
        if not starting.done():
            await starting
        await broker.stop()

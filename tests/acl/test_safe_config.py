"""Safe administration with ACL off: config updates never move data or listeners, a near-zero
fileReservedTime needs --force, and a live master cannot be replaced at the NameServer."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from daemon.acl.signature import Signer
from daemon.broker.config import BrokerConfig
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingCommandError
from daemon.safe_config import FORCE_FIELD, locked_keys, refuse_unsafe, under_floor
from store.cleanup import FakeDiskUsage
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, write_acl
from tests.support.broker import BrokerClient, BrokerHandle
from tests.support.namesrv import Namesrv
from tests.support.retention import retention_cluster, wait_until as wait_for
from tests.support.waiting import wait_until


def test_locked_keys_cover_every_spelling() -> None:
    keys = {
        "storePathRootDir": "/x",
        "store_path_commit_log": "/x",
        "mappedFileSizeCommitLog": "4096",
        "maxIndexNum": "1",
        "brokerIP1": "1.2.3.4",
        "listenPort": "1",
        "aclEnable": "false",
        "fileReservedTime": "48",
        "brokerPermission": "6",
        "haMasterAddress": "10.6.6.6:10912",  # where a slave copies the store from
        "readOnlyCommitLogStorePaths": "/x",
        "enableDLegerCommitLog": "true",
        "dLegerPeers": "n0-10.6.6.6:40911",
        "messageStorePlugIn": "evil.Plugin",
        "flushDiskType": "ASYNC_FLUSH",
        "messageDelayLevel": "1s",
        # a daemon's defences and where it registers
        "namesrvAddr": "10.6.6.6:9876",
        "protectedMode": "false",
        "aclAdminFreshness": "0",
        "diskSpaceWarningLevelRatio": "1",
        "remotingMaxConnections": "1",
        "remotingMaxBufferedBytes": "999999999999",
        "kvConfigMaxTotalBytes": "999999999999",
        "kvConfigMaxNamespaceBytes": "999999999999",
        "kvConfigMaxValueBytes": "999999999999",
    }
    assert set(locked_keys(keys)) == set(keys) - {"fileReservedTime", "brokerPermission"}
    with pytest.raises(RemotingCommandError, match=r"black list: .*namesrvAddr.*protectedMode"):
        refuse_unsafe({"protectedMode": "false", "namesrvAddr": "x:1"}, {}, trusted=True)


def test_no_remote_update_opens_or_closes_a_port() -> None:
    """vipListenEnable decides at the next start whether listenPort - 2 opens: a remote update (persisted
    into broker.conf) opened a port an operator had closed, or closed the one a 4.9.8 slave syncs from."""
    assert locked_keys({"vipListenEnable": "true", "vip_listen_enable": "false"}) == [
        "vipListenEnable",
        "vip_listen_enable",
    ]


def test_who_may_shorten_retention() -> None:
    """A lower retention or clean ratio needs a trusted sender; under a floor also the --force marker,
    which counts only from a trusted sender (anyone can add a field)."""
    current = BrokerConfig(file_reserved_time=72, disk_space_clean_forcibly_ratio=85)
    force = {FORCE_FIELD: "true"}
    for updates, fields in (
        ({"fileReservedTime": "48"}, {}),
        ({"fileReservedTime": "0"}, force),
        ({"diskMaxUsedSpaceRatio": "10"}, {}),
        ({"maxMessageSize": "1"}, force),
    ):
        with pytest.raises(RemotingCommandError) as refused:
            refuse_unsafe(updates, fields, current=current, trusted=False)
        assert refused.value.code == ResponseCode.NO_PERMISSION
    refuse_unsafe({"fileReservedTime": "96", "maxMessageSize": "8388608"}, {}, current=current, trusted=False)
    refuse_unsafe({"fileReservedTime": "48"}, {}, current=current, trusted=True)
    with pytest.raises(RemotingCommandError, match="--force"):
        refuse_unsafe({"fileReservedTime": "0"}, {}, current=current, trusted=True)
    refuse_unsafe({"fileReservedTime": "0", "maxMessageSize": "1"}, force, current=current, trusted=True)


def test_each_floor_says_what_its_own_value_would_do() -> None:
    """A cleanup deletes files read or not; a small maxMessageSize deletes nothing (it said "read or not"
    too, the cleanup keys' words on a key about sends)."""
    assert (
        under_floor("maxMessageSize", "100")
        == "maxMessageSize=100: under 1024 bytes would refuse nearly every send"
    )
    assert under_floor("fileReservedTime", "0") == (
        "fileReservedTime=0: under 1 h would let the next cleanup delete every CommitLog file, read or not"
    )
    assert "young CommitLog files once the disk is that full, read or not" in str(
        under_floor("diskSpaceCleanForciblyRatio", "20")
    )
    assert under_floor("maxMessageSize", "1024") is None and under_floor("fileReservedTime", "x") is None


@pytest.mark.slow
def test_a_low_force_watermark_needs_force_as_a_short_retention(tmp_path: Path) -> None:
    """diskSpaceCleanForciblyRatio under the disk's usage deletes every young CommitLog file but the
    newest at the next cleanup run, read or not: the same wipe as fileReservedTime=0 by another key."""
    with retention_cluster(tmp_path, FakeDiskUsage(0.30)) as rc:
        rc.send("TR", 400)
        files = rc.commitlog_files()
        assert len(files) >= 3
        for body in (b"diskSpaceCleanForciblyRatio=20\n", b"diskSpaceCleanForciblyRatio = -1\n"):
            r = rc.run(rc.client.call(RequestCode.UPDATE_BROKER_CONFIG, body=body))
            assert r.code == ResponseCode.NO_PERMISSION and "--force" in (r.remark or ""), r.remark
        assert rc.store.config.disk_space_clean_forcibly_ratio == 85
        rc.after_cleanup_runs()  # cleanup runs keep every file
        assert rc.commitlog_files() == files
        ok = rc.run(
            rc.client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"diskSpaceCleanForciblyRatio=88\n")
        )
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        forced = rc.run(
            rc.client.call(
                RequestCode.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, b"diskSpaceCleanForciblyRatio=20\n"
            )
        )
        assert forced.code == ResponseCode.SUCCESS and rc.store.config.disk_space_clean_forcibly_ratio == 20


async def test_broker_config_updates_refuse_keys_that_move_data(broker: BrokerHandle) -> None:
    config = broker.broker.config
    path = Path(config.config_path)
    size, root, port = config.mapped_file_size_commit_log, config.store_path_root_dir, config.listen_port
    for body in (
        b"mappedFileSizeCommitLog=4096\n",
        b"storePathRootDir=/tmp/elsewhere\n",
        b"listenPort=1\n",
        b"brokerName=evil\nfileReservedTime=48\n",
    ):
        r = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        assert r.code == ResponseCode.NO_PERMISSION and "black list" in (r.remark or ""), r.remark
    assert (config.mapped_file_size_commit_log, config.store_path_root_dir, config.listen_port) == (
        size,
        root,
        port,
    )
    assert config.broker_name == "broker-a" and config.file_reserved_time != 48
    assert not path.exists() or "mappedFileSize" not in path.read_text()

    wipe = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=0\n")
    assert wipe.code == ResponseCode.NO_PERMISSION and "--force" in (wipe.remark or "")
    assert config.file_reserved_time != 0
    forced = await broker.call(
        RequestCode.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, b"fileReservedTime=0\n"
    )
    assert forced.code == ResponseCode.SUCCESS and config.file_reserved_time == 0


async def test_namesrv_keeps_a_live_master(namesrv: Namesrv) -> None:
    async with RemotingClient() as real, RemotingClient() as intruder:
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS
        hijack = await namesrv.register({"T": 4}, broker_addr="10.6.6.6:10911", client=intruder)
        assert hijack.code == ResponseCode.NO_PERMISSION and "live connection" in (hijack.remark or "")
        fields = {
            "brokerName": "broker-a",
            "brokerAddr": "127.0.0.1:10911",
            "clusterName": "DefaultCluster",
            "brokerId": "0",
        }
        gone = await intruder.invoke(
            namesrv.addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields)
        )
        assert gone.code == ResponseCode.NO_PERMISSION
        route = namesrv.controller.routes.broker_addr_table["broker-a"].broker_addrs
        assert route == {0: "127.0.0.1:10911"}
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS  # its own renewal
        await real.close()  # the real master's channel is gone: a new master may take over
        for _ in range(50):
            took = await namesrv.register({"T": 4}, broker_addr="10.7.7.7:10911", client=intruder)
            if took.code == ResponseCode.SUCCESS:
                break
            await asyncio.sleep(0.1)
        assert took.code == ResponseCode.SUCCESS, took.remark
        assert namesrv.controller.routes.broker_addr_table["broker-a"].broker_addrs[0] == "10.7.7.7:10911"


async def test_namesrv_keeps_a_live_masters_address(namesrv: Namesrv) -> None:
    """The master's own address, re-registered by another connection under another id, name or
    cluster, must not move it out of its slot nor take over its channel (whose close drops it)."""
    master = "127.0.0.1:10911"
    async with RemotingClient() as real, RemotingClient() as intruder:
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS
        for kwargs in (
            {"broker_id": 1},  # same address as a slave: the master's slot would be dropped
            {"broker_name": "evil"},  # the address under another name: its channel would be ours
            {"cluster": "EvilCluster"},
            {},  # same place, new topic data: the route would be the intruder's to rewrite
        ):
            r = await namesrv.register({"T": 1, "T2": 1}, broker_addr=master, client=intruder, **kwargs)
            assert r.code == ResponseCode.NO_PERMISSION, (kwargs, r.remark)
        routes = namesrv.controller.routes
        assert routes.broker_addr_table["broker-a"].broker_addrs == {0: master}
        assert set(routes.broker_addr_table) == {"broker-a"}
        assert set(routes.cluster_addr_table) == {"DefaultCluster"}
        assert "T2" not in routes.topic_queue_table
        closed: list[object] = []
        namesrv.controller.server.on_connection_closed(closed.append)  # called after the NameServer's own
        await intruder.close()
        await wait_until(lambda: len(closed) >= 1)  # the NameServer has handled the intruder's close
        assert routes.broker_addr_table["broker-a"].broker_addrs == {0: master}  # and kept the master
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS


@pytest.mark.slow
def test_the_force_marker_is_no_authority_and_a_lowered_retention_logs_its_losses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The attack: an anonymous UPDATE_BROKER_CONFIG with mqctlForce=true and fileReservedTime=0, then
    code 329, deleted acknowledged, unconsumed messages, logged at INFO. A whitelisted peer (ACL on) is
    not an admin signature: refused, nothing deleted. The admin's own update goes through, and what the
    cleanup then deletes is logged at ERROR with the unconsumed count per group."""
    home = tmp_path / "home"
    write_acl(home, PLAIN_ACL.replace("10.10.103.*", "127.0.0.1"))  # the attacker's address is trusted
    with retention_cluster(
        tmp_path / "c", FakeDiskUsage(0.30), acl_enable=True, rocketmq_home=str(home)
    ) as rc:
        rc.send("TR", 200)
        files = rc.commitlog_files()
        assert len(files) >= 3
        rc.cluster.broker.offsets.commit_offset("G1", "TR", 0, 0)
        rc.cluster.broker.offsets.commit_offset("G1", "TR", 1, 0)
        for fields in ({FORCE_FIELD: "true"}, {}):
            wipe = rc.run(
                rc.client.call(RequestCode.UPDATE_BROKER_CONFIG, dict(fields), b"fileReservedTime=0\n")
            )
            assert wipe.code == ResponseCode.NO_PERMISSION and "admin-signed" in (wipe.remark or ""), (
                wipe.remark
            )
        assert rc.run(rc.client.call(RequestCode.DELETE_EXPIRED_COMMITLOG)).code == ResponseCode.SUCCESS
        rc.after_cleanup_runs()
        assert rc.commitlog_files() == files and rc.store.config.file_reserved_time == 72

        admin = BrokerClient(rc.client.addr, RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK)))
        try:
            ok = rc.run(
                admin.call(RequestCode.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, b"fileReservedTime=0\n")
            )
            assert ok.code == ResponseCode.SUCCESS, ok.remark
            with caplog.at_level(logging.ERROR, logger="store.cleanup"):
                assert rc.run(admin.call(RequestCode.DELETE_EXPIRED_COMMITLOG)).code == ResponseCode.SUCCESS
                wait_for(lambda: len(rc.commitlog_files()) == 1)
                rc.after_cleanup_runs(1)
        finally:
            rc.run(admin.client.close())
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("retention lowered at run time (fileReservedTime 72 -> 0)" in line for line in lines), lines
    assert any("unconsumed messages destroyed per group: G1=" in line for line in lines), lines

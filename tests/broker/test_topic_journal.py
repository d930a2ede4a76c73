"""Topic creations journaled beside topics.json (docs/design/topic-journal.md): durable when answered, across
a SIGKILL too, and folded into topics.json by a clean stop, which is all a Java broker reads."""

from __future__ import annotations

import errno
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon.broker.config import BrokerConfig
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.broker.managers.topics import TopicConfigManager
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.clock import SystemClock
from store.config_files import TopicConfigFile
from store.models import PermName
from tests.support.bounded import Daemon
from tests.support.broker import BrokerHandle
from tests.support.ports import free_port


@pytest.mark.slow  # a broker process, killed and started again
async def test_created_topics_survive_sigkill_and_a_clean_stop_folds_them_into_topics_json(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-j\nbrokerIP1=127.0.0.1\nlistenPort={port}\nstorePathRootDir={tmp_path / 'store'}\n"
        "mappedFileSizeCommitLog=4194304\nmetricsEnable=false\n"
    )
    topics_json = tmp_path / "store" / "config" / "topics.json"
    journal = Path(f"{topics_json}.journal")
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    client = RemotingClient()
    addr = f"127.0.0.1:{port}"

    async def broker_up() -> bool:
        try:
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
        except Exception:
            return False
        return r.code == ResponseCode.SUCCESS

    def on_disk() -> set[str]:
        return set(fastjson.loads(topics_json.read_text())["topicConfigTable"])

    names = [f"Journaled{i}" for i in range(30)]
    broker = Daemon(argv, cli_env, tmp_path / "broker.log")
    broker.start()
    try:
        await broker.serving(broker_up)
        for name in names:
            header = CreateTopicRequestHeader(name, "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            assert (await client.invoke(addr, request, 5.0)).code == ResponseCode.SUCCESS
        assert not set(names) & on_disk()  # answered from the journal: topics.json was not rewritten
        broker.kill()
        crashed = TopicConfigFile(str(topics_json), SystemClock(), read_only=True)
        crashed.load()
        assert set(names) <= set(crashed.table) and journal.stat().st_size > 0

        broker.start()
        await broker.serving(broker_up)
        assert set(names) <= on_disk() and journal.stat().st_size == 0  # replayed and folded at start
        header = CreateTopicRequestHeader("AfterRestart", "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        assert (await client.invoke(addr, request, 5.0)).code == ResponseCode.SUCCESS
        assert "AfterRestart" not in on_disk()
    finally:
        broker.stop()
        await client.close()
    assert {*names, "AfterRestart"} <= on_disk() and journal.stat().st_size == 0  # the clean stop folded it


def test_a_topic_created_in_a_send_is_journaled_outside_the_table_lock(tmp_path: Path) -> None:
    """A writer of topics.json takes its write lock, then the table's lock; a send auto-creating a topic
    used to take them the other way round (persisting while it held the table), so a group-committed
    ``topic apply`` persisting at that moment deadlocked the event loop. Now the creation is journaled
    after the table's lock is released, and it is durable when create_system_like returns."""
    file = TopicConfigFile(str(tmp_path / "topics.json"), SystemClock())
    topics = TopicConfigManager(BrokerConfig(), file)
    created: list[str] = []
    with file._write_lock:  # a concurrent persist, between its two locks
        creator = threading.Thread(
            target=lambda: created.append(
                topics.create_system_like("%RETRY%G", 1, PermName.READ_WRITE).topic_name
            )
        )
        creator.start()
        deadline = time.monotonic() + 10
        while "%RETRY%G" not in file._unjournaled:  # the creation has changed the table
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert file.lock.acquire(timeout=10), "the creation holds the table's lock while waiting to persist"
        file.lock.release()
    creator.join(timeout=10)
    assert created == ["%RETRY%G"]
    journal = Path(f"{tmp_path / 'topics.json'}.journal").read_text()
    assert "%RETRY%G" in journal and not (tmp_path / "topics.json").exists()


async def test_a_creation_refused_for_a_full_disk_is_not_in_force_nor_written_later(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on the journal's append answers an error; the refused topic (or the refused change of one)
    must then not be served, routed, or written into topics.json by the next creation that succeeds."""

    async def create(name: str, queues: int) -> RemotingCommand:
        header = CreateTopicRequestHeader(name, "TBW102", queues, queues, 6, "SINGLE_TAG").to_ext_fields()
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return await broker.client.invoke(broker.addr, request, 5.0)

    assert (await create("Existing", 4)).code == ResponseCode.SUCCESS

    def full(self: TopicConfigFile, journal: str, lines: list[str]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TopicConfigFile, "_append", full)
    assert (await create("Refused", 2)).code != ResponseCode.SUCCESS
    assert (await create("Existing", 8)).code != ResponseCode.SUCCESS
    topics = broker.broker.topics
    existing = topics.get("Existing")
    assert topics.get("Refused") is None and existing is not None and existing.write_queue_nums == 4
    monkeypatch.undo()
    assert (await create("Later", 2)).code == ResponseCode.SUCCESS
    path = topics.file.path
    assert path is not None
    on_disk = TopicConfigFile(path, SystemClock(), read_only=True)
    on_disk.load()
    assert "Later" in on_disk.table and "Refused" not in on_disk.table
    assert on_disk.table["Existing"].write_queue_nums == 4

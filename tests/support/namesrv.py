"""A real NameServer's config for tests (127.0.0.1:0, state in tmp_path) and a client speaking to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.headers import RegisterBrokerRequestHeader


def namesrv_config(tmp_path: Path, **overrides: object) -> NamesrvConfig:
    config = NamesrvConfig(listen_host="127.0.0.1", listen_port=0, data_dir=tmp_path / "namesrv")
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


@dataclass
class Namesrv:
    controller: NamesrvController
    client: RemotingClient

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.controller.port}"

    async def call(
        self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", version: int = 409
    ) -> RemotingCommand:
        return await self.client.invoke(
            self.addr, RemotingCommand.request(code, fields, body, version=version)
        )

    async def register(
        self,
        topics: dict[str, int],
        *,
        broker_name: str = "broker-a",
        broker_addr: str = "127.0.0.1:10911",
        broker_id: int = 0,
        cluster: str = "DefaultCluster",
        version: DataVersion | None = None,
        client: RemotingClient | None = None,
        compressed: bool = False,
    ) -> RemotingCommand:
        """Register like a broker: each topic with that many read/write queues, perm RW."""
        wrapper = TopicConfigSerializeWrapper(
            {t: TopicConfig(t, n, n) for t, n in topics.items()}, version or DataVersion(1, 1700000000000)
        )
        header = RegisterBrokerRequestHeader(
            broker_name, broker_addr, cluster, broker_addr.rsplit(":", 1)[0] + ":10912", broker_id, compressed
        )
        cmd = RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            header.to_ext_fields(),
            RegisterBrokerBody(wrapper).encode(compressed),
        )
        return await (client or self.client).invoke(self.addr, cmd)


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every registration body the NameServer parses whole from now on."""
    return _count(monkeypatch, "decode")


def count_heads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every registration body the NameServer reads without its topic table (a
    slave's) from now on."""
    return _count(monkeypatch, "decode_without_table")


def _count(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    sizes: list[int] = []
    read = getattr(RegisterBrokerBody, method)

    def counting(body: bytes, compressed: bool = False) -> RegisterBrokerBody:
        sizes.append(len(body))
        return read(body, compressed)  # type: ignore[no-any-return]

    monkeypatch.setattr(RegisterBrokerBody, method, staticmethod(counting))
    return sizes


@contextlib.asynccontextmanager
async def serving(config: NamesrvConfig) -> AsyncIterator[Namesrv]:
    """A NameServer on `config`, and a client of it; stopped (its KV file written) on the way out."""
    controller = NamesrvController(config)
    await controller.start()
    try:
        async with RemotingClient() as client:
            yield Namesrv(controller, client)
    finally:
        await controller.stop()

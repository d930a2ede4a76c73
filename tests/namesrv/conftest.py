"""A real NameServer on 127.0.0.1:0 with its state in tmp_path, and a client speaking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from tests.support.namesrv import Namesrv, namesrv_config


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[Namesrv]:
    controller = NamesrvController(namesrv_config(tmp_path))
    await controller.start()
    async with RemotingClient() as client:
        yield Namesrv(controller, client)
    await controller.stop()

"""Real third-party clients resolve routes from our NameServer (installed by
scripts/install-interop-clients.sh: the C++ client from PyPI in .venv-interop/, ali-ons via npm).

There is no broker yet, so the clients only resolve routes; the test plays the broker's
registration over its own connection, which stays open while the clients ask.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from tests.support.bounded import run_bounded
from tests.support.namesrv import Namesrv, namesrv_config

pytestmark = [pytest.mark.interop, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
INTEROP_PYTHON = ROOT / ".venv-interop" / "bin" / "python"
INSTALL_HINT = "run scripts/install-interop-clients.sh (the Makefile's test target does)"
TOPIC = "InteropTopic"


@dataclass
class Registered:
    addr: str
    #: (language, version, response code) of every route lookup the NameServer answered.
    lookups: list[tuple[str, int, int]] = field(default_factory=list)


@pytest.fixture
async def registered(tmp_path: Path) -> AsyncIterator[Registered]:
    """A NameServer with broker-a (4 queues of TOPIC) registered, recording who looked routes up."""
    controller = NamesrvController(namesrv_config(tmp_path))
    processors = controller.server.dispatcher.processors
    route = processors[RequestCode.GET_ROUTEINFO_BY_TOPIC]

    def recording(conn: Connection, req: RemotingCommand) -> Any:
        response = route(conn, req)
        assert isinstance(response, RemotingCommand)
        state.lookups.append((req.language.name, req.version, response.code))
        return response

    processors[RequestCode.GET_ROUTEINFO_BY_TOPIC] = recording
    await controller.start()
    try:
        async with RemotingClient() as broker_side:
            ns = Namesrv(controller, broker_side)
            state = Registered(ns.addr)
            assert (await ns.register({TOPIC: 4})).code == 0
            yield state
    finally:
        await controller.stop()


async def run(*argv: str | Path, deadline: float = 60) -> dict[str, object]:
    done = await run_bounded(argv, deadline=deadline, what=Path(argv[1]).name, cwd=HERE)
    assert done.returncode == 0, f"{argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


EXPECTED = [{"brokerName": "broker-a", "queueId": i} for i in range(4)]


async def test_cpp_client_resolves_route(registered: Registered) -> None:
    if not INTEROP_PYTHON.exists():
        pytest.fail(f"C++ client venv missing: {INSTALL_HINT}")
    result = await run(INTEROP_PYTHON, HERE / "cpp_route.py", registered.addr, TOPIC)
    assert result["status"] == 0
    assert ("CPP", 0) in {(lang, code) for lang, _, code in registered.lookups}
    assert [{k: q[k] for k in ("brokerName", "queueId")} for q in result["queues"]] == EXPECTED  # type: ignore[attr-defined]


async def test_ali_ons_resolves_route(registered: Registered) -> None:
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed: the ali-ons interop test needs them")
    if not (HERE / "node_modules" / "ali-ons").is_dir():
        pytest.fail(f"ali-ons not installed: {INSTALL_HINT}")
    result = await run(node, HERE / "ons_route.js", registered.addr, TOPIC)
    assert result == {"queues": EXPECTED, "brokerAddr": "127.0.0.1:10911"}
    assert ("JAVA", 121, 0) in registered.lookups  # ali-ons: legacy version, bare-key route JSON

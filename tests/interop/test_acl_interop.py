"""Real clients against our broker with aclEnable=true: ali-ons and the C++ client sign with their
credentials and produce and consume; a wrong secret, no credentials and a topic the account may not
publish to get nothing in, each refused by the broker's ACL check."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.acl.plain import AclDenied, PlainAccessValidator
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from store.names import retry_topic
from tests.support.acl import USER_AK, USER_SK, write_acl
from tests.support.bounded import run_bounded
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster
from tests.support.cpp import cpp_roundtrip

pytestmark = [pytest.mark.interop, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOPIC, GROUP = "AclTopic", "CID_ACL"
DENIED_TOPIC = "AclDeniedTopic"  # exists, but the account's defaultTopicPerm is DENY
COUNT = 20

ACL = f"""\
accounts:
  - accessKey: {USER_AK}
    secretKey: "{USER_SK}"
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB|SUB]
    groupPerms: [{GROUP}=SUB]
"""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    home = tmp_path / "home"
    write_acl(home, ACL)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    handle.broker.topics.create_system_like(TOPIC, 2, 6)
    handle.broker.topics.create_system_like(DENIED_TOPIC, 2, 6)
    handle.broker.topics.create_system_like(retry_topic(GROUP), 1, 6)
    await handle.broker.register_all()
    try:
        yield handle
    finally:
        await stop_cluster(handle)


async def run(
    args: list[str], env: dict[str, str], deadline: float = 60
) -> tuple[int, dict[str, object], str]:
    done = await run_bounded(
        args, deadline=deadline, what=f"{Path(args[1]).name} {args[2]}", cwd=HERE, env=env
    )
    lines = done.stdout.strip().splitlines()
    return (done.returncode, (json.loads(lines[-1]) if lines and done.returncode == 0 else {}), done.stderr)


def refused_sends(cluster: ClusterHandle) -> list[str]:
    """The remarks of the sends the broker's ACL check refuses from now on (an AclDenied is always
    answered NO_PERMISSION, 16)."""
    dispatcher = cluster.broker.server.dispatcher
    guard = dispatcher.guard
    assert isinstance(guard, PlainAccessValidator)
    remarks: list[str] = []

    def recording(conn: Connection, request: RemotingCommand) -> None:
        try:
            guard(conn, request)
        except AclDenied as exc:
            if request.code in SEND_CODES:
                remarks.append(exc.remark)
            raise

    dispatcher.guard = recording
    return remarks


def stored(cluster: ClusterHandle) -> int:
    return sum(cluster.broker.store.get_max_offset(t, q) for t in (TOPIC, DENIED_TOPIC) for q in range(2))


#: (credentials as KEY/SECRET, topic, the refusal's words): each send refused, nothing stored
REFUSED = [
    ((USER_AK, "wrong-secret"), TOPIC, "signature check failed"),
    (None, TOPIC, "carries no AccessKey"),
    ((USER_AK, USER_SK), DENIED_TOPIC, f"needs PUB on topic {DENIED_TOPIC}, has DENY"),
]
SEND_CODES = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}


def credentials(prefix: str, pair: tuple[str, str] | None) -> dict[str, str]:
    """The client's credential variables; an empty key means an unsigned client to both scripts."""
    key, secret = pair or ("", "")
    return {f"{prefix}_ACCESS_KEY": key, f"{prefix}_SECRET_KEY": secret}


async def test_ali_ons_signs_produces_and_consumes(cluster: ClusterHandle) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node/npm not installed: the ali-ons interop test needs them")
    if not (HERE / "node_modules" / "ali-ons").is_dir():
        pytest.fail("ali-ons not installed: run scripts/install-interop-clients.sh (make test does)")
    script = str(HERE / "ons_broker_roundtrip.js")
    ns = cluster.namesrv_addr
    remarks = refused_sends(cluster)
    for pair, topic, words in REFUSED:
        code, _, err = await run([node, script, "produce", ns, topic, "1"], credentials("ONS", pair))
        assert code != 0 and stored(cluster) == 0, f"{words}: {err[-2000:]}"
        assert remarks and all(words in r for r in remarks), (words, remarks)
        remarks.clear()

    right = {"ONS_ACCESS_KEY": USER_AK, "ONS_SECRET_KEY": USER_SK}
    code, result, err = await run([node, script, "produce", ns, TOPIC, str(COUNT)], right)
    assert code == 0, err[-3000:]
    assert {s["status"] for s in result["sent"]} == {"SEND_OK"}  # type: ignore[union-attr]
    assert stored(cluster) == COUNT
    code, result, err = await run(
        [node, script, "consume", ns, TOPIC, GROUP, str(COUNT), "0", "6000", "60000"], right, deadline=100
    )
    assert code == 0, err[-3000:]
    assert len({r["key"] for r in result["received"]}) == COUNT  # type: ignore[union-attr]


async def test_cpp_client_signs_produces_and_consumes(cluster: ClusterHandle) -> None:
    ns = cluster.namesrv_addr
    remarks = refused_sends(cluster)
    for pair, topic, words in REFUSED:
        code, _, err = await cpp_roundtrip(ns, topic, GROUP, 1, 5, "produce", credentials("CPP", pair))
        assert code != 0 and stored(cluster) == 0, f"{words}: {err[-2000:]}"
        assert remarks and all(words in r for r in remarks), (words, remarks)
        remarks.clear()

    right = {"CPP_ACCESS_KEY": USER_AK, "CPP_SECRET_KEY": USER_SK}
    code, result, err = await cpp_roundtrip(ns, TOPIC, GROUP, COUNT, 60, env=right)
    assert code == 0, err[-3000:]
    assert [s["status"] for s in result["sent"]] == [0] * COUNT  # type: ignore[union-attr]
    assert sorted(result["received"]) == sorted(result["expected"])  # type: ignore[arg-type]

"""``mqctl store verify --against HOST:PORT``: a (slave's) store compared with a live broker record by
record, through the broker's VIEW_MESSAGE_BY_ID: the first differing offset, records only on one side."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message
from tests.daemons import local_cluster
from tests.support.cli import RunCli

SIZES = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
}


def _put(store: DefaultMessageStore, topic: str, n: int, size: int) -> list[int]:
    return [store.put_message(Message(topic, b"%06d" % i * (size // 6))).phys_offset for i in range(n)]


def _copy_log(src: Path, dest: Path) -> None:
    """A copy of the CommitLog, its ConsumeQueues and index rebuilt from it by a start of the store."""
    shutil.copytree(src / "commitlog", dest / "commitlog")
    with DefaultMessageStore(StoreConfig(store_path_root_dir=str(dest), **SIZES)):
        pass


@pytest.mark.slow
def test_a_diverged_copy_is_located_a_lagging_one_is_a_prefix(cli: RunCli, tmp_path: Path) -> None:
    with local_cluster(tmp_path, **SIZES) as c:
        master = c.broker.store
        assert isinstance(master, DefaultMessageStore)
        root = Path(master.config.store_path_root_dir)
        _put(master, "T", 150, 300)
        seam = master.max_phy_offset
        master.commit_log.flush()
        diverged = tmp_path / "diverged"
        _copy_log(root, diverged)
        # the copy runs on its own for a while (a slave promoted by hand): 30 records the master never had
        with DefaultMessageStore(StoreConfig(store_path_root_dir=str(diverged), **SIZES)) as alone:
            foreign = _put(alone, "Foreign", 30, 2000)
        assert foreign[0] == seam
        _put(master, "T", 50, 300)
        master.commit_log.flush()

        result = cli(
            "store", "verify", "--store", str(diverged), "--against", c.broker_addr, "--max-problems", "5",
            "-o", "json",
        )  # fmt: skip
        assert result.code == 10, result.stdout + result.stderr
        against = result.json()["against"]
        assert against["first_difference"] == seam and not against["ok"]
        assert (against["same"], against["differing"] + against["only_here"]) == (150, 30)
        assert against["differing"] >= 1 and against["only_here"] >= 1 and against["only_there_bytes"] == 0
        assert [d["commit_log_offset"] for d in against["differences"]] == foreign[:5]
        assert (
            against["differences"][0]["where"] == "differs"
            and "Foreign/0" in against["differences"][0]["here"]
        )
        assert against["differences_not_listed"] == 25
        assert f"differs from {c.broker_addr} from CommitLog offset {seam}" in result.stderr

        # a copy of the master's log, behind it: a prefix, so verify agrees; what it lacks is listed
        behind = tmp_path / "behind"
        _copy_log(root, behind)
        end = master.max_phy_offset
        later = _put(master, "T", 10, 300)
        master.commit_log.flush()
        result = cli("store", "verify", "--store", str(behind), "--against", c.broker_addr, "-o", "json")
        assert result.code == 0, result.stdout + result.stderr
        against = result.json()["against"]
        assert (against["ok"], against["same"], against["differing"], against["only_here"]) == (
            True,
            200,
            0,
            0,
        )
        assert (against["first_difference"], against["only_there_bytes"]) == (
            end,
            master.max_phy_offset - end,
        )
        assert [(d["commit_log_offset"], d["where"]) for d in against["differences"]] == [
            (o, "only there") for o in later
        ]
        table = cli("store", "verify", "--store", str(behind), "--against", c.broker_addr)
        assert table.code == 0 and f"against {c.broker_addr}" in table.stdout and "only there" in table.stdout


@pytest.mark.slow
def test_against_a_tls_only_broker_uses_the_contexts_tls(cli: RunCli, tmp_path: Path) -> None:
    """An operator's context names the CA (here: test mode, --insecure) and every online command uses
    it; --against connected in plaintext and a TLS-only master closed it (exit 5)."""
    with local_cluster(tmp_path, tls_server_mode="enforcing", **SIZES) as c:
        master = c.broker.store
        assert isinstance(master, DefaultMessageStore)
        _put(master, "T", 5, 300)
        master.commit_log.flush()
        copy = tmp_path / "copy"
        _copy_log(Path(master.config.store_path_root_dir), copy)
        added = cli("context", "add", "prod", "-n", c.namesrv_addr, "--insecure", "--use")
        assert added.code == 0, added.stderr
        result = cli("store", "verify", "--store", str(copy), "--against", c.broker_addr, "-o", "json")
    assert result.code == 0, result.stderr
    assert result.json()["against"]["ok"]

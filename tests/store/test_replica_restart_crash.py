"""A slave killed (SIGKILL) in the middle of beginning its log again at its master's first retained offset
(:func:`store.replica_tail.restart_replica_log`): whatever step it died at, it reopens as one whole log,
the old one (what is left of it) or the new empty one, and serves no record it no longer holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store import DefaultMessageStore, Message
from tests.support.paths import ROOT
from tests.support.stores import small_config

FILE = 64 * 1024
START = 20 * FILE

#: Opens the slave's store at argv[1], marks its whole log its master's and serves it, then begins it again at START and
#: dies (os._exit, as SIGKILL: nothing flushed or closed) before the argv[2]-th file is destroyed, or,
#: with -1, before the final checkpoint.
CRASHER = f"""
import os, sys
from store import DefaultMessageStore
from store.mapped_file import MappedFile
from tests.support.stores import small_config
store = DefaultMessageStore(small_config(sys.argv[1], broker_role="SLAVE"))
store.open()
store.start()
store.replica_checked(store.max_phy_offset)
while store.dispatch_replica():
    pass
store._checkpoint()
k, seen = int(sys.argv[2]), [0]
destroy = MappedFile.destroy
def dying(self, *args, **kwargs):
    if seen[0] == k:
        os._exit(9)
    seen[0] += 1
    return destroy(self, *args, **kwargs)
MappedFile.destroy = dying
if k < 0:
    store._checkpoint = lambda *args, **kwargs: os._exit(9)
store.restart_replica_log({START})
os._exit(0)
"""


def served(store: DefaultMessageStore) -> dict[tuple[int, int], bytes]:
    """Every record each queue serves, by (queue, queue offset)."""
    out = {}
    for q in range(4):
        offset = store.get_min_offset("T", q)
        while offset < store.get_max_offset("T", q):
            got = store.get_messages("G", "T", q, offset, 32)
            out.update({(q, m.queue_offset): m.message.body for m in got.messages})
            if got.next_begin_offset <= offset:
                break
            offset = got.next_begin_offset
    return out


@pytest.mark.slow
@pytest.mark.parametrize("dies_at", [0, 1, 2, 3, 4, 6, 40, -1])
def test_a_slave_killed_while_its_log_begins_again_reopens_whole(tmp_path: Path, dies_at: int) -> None:
    with DefaultMessageStore(small_config(tmp_path)) as store:
        for i in range(300):  # three CommitLog files
            assert store.put_message(Message("T", f"r{i}".encode() * 100, queue_id=i % 4)).ok
        end = store.max_phy_offset
    env = {**os.environ, "MQCTL_NATIVE": "0", "PYTHONPATH": str(ROOT)}
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHER, str(tmp_path), str(dies_at)], cwd=ROOT, env=env, capture_output=True
    )
    assert crashed.returncode in (0, 9), crashed.stderr.decode()
    with DefaultMessageStore(small_config(tmp_path, broker_role="SLAVE")) as again:
        files = sorted(int(n) for n in os.listdir(tmp_path / "commitlog"))
        assert files == list(range(again.min_phy_offset, again.max_phy_offset + 1, FILE))[: len(files)]
        if again.min_phy_offset == START:  # the new log: empty, serving nothing of the old
            assert again.max_phy_offset == START and served(again) == {}
        else:  # what is left of the old log: a whole tail of it, each record at its own queue offset
            assert again.max_phy_offset == end
            held = served(again)
            assert held == {(q, o): f"r{4 * o + q}".encode() * 100 for q, o in held}
            for q in range(4):  # no hole: from its first record still held to its end
                offsets = sorted(o for p, o in held if p == q)
                assert (
                    offsets
                    == list(range(offsets[0], again.get_max_offset("T", q)))
                    == list(range(offsets[0], 75))
                )


def test_a_log_begun_again_is_another_store(tmp_path: Path) -> None:
    """A slave whose log begins again at its master's first offset takes a new identity: a slave whose mark
    named the old one (this store was its master) no longer takes this log's start for a retention's."""
    with DefaultMessageStore(small_config(tmp_path, broker_role="SLAVE")) as store:
        before = store.identity
        store.restart_replica_log(START)
        assert store.identity != before and (tmp_path / "identity").read_bytes().hex() == store.identity
    with DefaultMessageStore(small_config(tmp_path, broker_role="SLAVE")) as again:
        assert again.identity == store.identity and again.min_phy_offset == START

"""Pictures of every screen at 120x36 over fixed data and a frozen clock (pytest-textual-snapshot).

Update after an intended change with ``pytest tests/top/test_snapshots.py --snapshot-update`` and look
at the report before committing.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from mqctl.errors import ConnectError
from mqctl.top.app import TopApp
from tests.top.data import fixed_source

SIZE = (120, 36)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def app_on(screen: str) -> TopApp:
    source, clock = fixed_source()
    return TopApp(
        source, interval=3600, clock=clock, target="NameServer 10.0.0.1:9876;10.0.0.2:9876", screen=screen
    )


@pytest.mark.slow
@pytest.mark.parametrize("screen", ["overview", "topics", "groups", "store"])
def test_screen(screen: str, snap_compare: Any) -> None:
    assert snap_compare(app_on(screen), terminal_size=SIZE, run_before=settle)


@pytest.mark.slow
def test_group_drill_down(snap_compare: Any) -> None:
    async def open_billing(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)

    assert snap_compare(app_on("groups"), terminal_size=SIZE, run_before=open_billing)


@pytest.mark.slow
def test_filtered_topics_sorted_by_bytes(snap_compare: Any) -> None:
    async def filter_and_sort(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("slash", "e", "enter", "s", "s", "s")

    assert snap_compare(app_on("topics"), terminal_size=SIZE, run_before=filter_and_sort)


@pytest.mark.slow
def test_help(snap_compare: Any) -> None:
    assert snap_compare(app_on("overview"), terminal_size=SIZE, press=["question_mark"], run_before=settle)


@pytest.mark.slow
def test_lost_cluster_is_stale_with_error(snap_compare: Any) -> None:
    """Old numbers stay visible but dimmed under a STALE banner, the error in the status bar.

    The refresh interval is an hour, and the frozen clock moves past two of them: with a short interval
    the app's own timer (real time) refreshed again on a loaded host before the picture, and the status
    bar counted 'failed 2×'."""
    source, clock = fixed_source()
    app = TopApp(source, interval=3600, clock=clock, target="NameServer 10.0.0.1:9876")

    async def lose_cluster(pilot: Pilot[None]) -> None:
        await settle(pilot)
        source.failure = ConnectError("no NameServer answers: 10.0.0.1:9876 (refused)")
        clock.advance(3 * 3600 * 1000)
        await pilot.press("r")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=lose_cluster)

"""``broker start --print-config``: what the broker will use, not the marks of settings left unset."""

from __future__ import annotations

from pathlib import Path

from daemon.config import parse_properties
from tests.support.cli import RunCli


def test_derived_settings_show_their_value_under_a_comment(cli: RunCli, tmp_path: Path) -> None:
    """haListenPort printed -1, read as a port; the broker listens on listenPort + 1."""
    shown = cli("broker", "start", "--store", str(tmp_path / "s"), "--port", "20911", "--print-config")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("haListenPort=20912")
    assert lines[at - 1].startswith("# haListenPort unset: ") and "listenPort + 1" in lines[at - 1]
    assert "brokerIP2=127.0.0.1" in lines and f"storePathCommitLog={tmp_path / 's' / 'commitlog'}" in lines
    settings = parse_properties(shown.stdout)
    assert not [k for k, v in settings.items() if v.strip() == "-1"], settings


def test_a_set_or_ephemeral_ha_port_is_shown_as_it_is(cli: RunCli, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 's'}\nhaListenPort=30000\n")
    pinned = cli("broker", "start", "-c", str(conf), "--print-config")
    assert pinned.code == 0 and "\nhaListenPort=30000\n" in pinned.stdout
    assert "# haListenPort" not in pinned.stdout
    free = cli("broker", "start", "--store", str(tmp_path / "s"), "--port", "0", "--print-config")
    assert "\nhaListenPort=0\n" in free.stdout and "a free port" in free.stdout

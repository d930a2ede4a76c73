"""Ctrl-C while a report is still being written to a reader that has not read it yet (``> report.json`` on
a slow disk, ``| jq``, a test reading at the end): what was produced arrives whole (a JSON document closed,
JSON lines, CSV and table rows whole), then one line on stderr and exit 130. A second Ctrl-C while the
write is still blocked ends the process at once; a reader that leaves (``| head``) is still no error.

Each test first fills the command's stdout pipe (64 KiB) and presses Ctrl-C only once the command sleeps
in that write: where Python's ``KeyboardInterrupt`` cut the document mid-record."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.config import StoreConfig
from store.engine import DefaultMessageStore
from store.message import Message
from tests.support.bounded import finish
from tests.support.cli import blocked_writing, run_process, spawn
from tests.support.paths import ROOT
from tests.support.stores import small_config

RECORDS = 1500
FILE = 64 * 1024  # small_config's CommitLog files


def _config(root: Path) -> StoreConfig:
    return small_config(root, max_hash_slot_num=100, max_index_num=400)  # as the offline commands read it


def _records(root: Path) -> list[tuple[int, int]]:
    """``RECORDS`` messages over several CommitLog files: ``(offset, size)`` of each."""
    with DefaultMessageStore(_config(root)) as s:
        out = []
        for i in range(RECORDS):
            r = s.put_message(
                Message("T", f"body-{i}-".encode() * 10, queue_id=i % 2, properties={"KEYS": f"k{i}"})
            )
            out.append((r.phys_offset, r.wrote_bytes))
    return out


def _damage(root: Path, offsets: list[tuple[int, int]], at: int, value: bytes) -> None:
    """Overwrite ``value`` at ``at`` bytes into each record of ``offsets``."""
    files: dict[Path, bytearray] = {}
    for offset, _size in offsets:
        path = root / "commitlog" / f"{offset - offset % FILE:020d}"
        raw = files.setdefault(path, bytearray(path.read_bytes()))
        raw[offset % FILE + at : offset % FILE + at + len(value)] = value
    for path, raw in files.items():
        path.write_bytes(bytes(raw))


@pytest.fixture(params=["buffered", "unbuffered"])
def cli_env(cli_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    """Each test with stdout buffered and under PYTHONUNBUFFERED (``python -u``), where a signal in a
    large write to a pipe made CPython write a part of it and drop the rest without an error."""
    env = {k: v for k, v in cli_env.items() if k != "PYTHONUNBUFFERED"}
    return env | ({"PYTHONUNBUFFERED": "1"} if request.param == "unbuffered" else {})


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose every record is damaged: ``store verify`` lists a problem for each (over 64 KiB)."""
    root = tmp_path_factory.mktemp("interrupted") / "store"
    records = _records(root)
    _damage(root, records, 100, b"\xff")  # a body byte: its CRC fails
    return root


@pytest.fixture(scope="module")
def quarantined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose recovery set aside most of the files it checks (a damaged TOTALSIZE at the start of
    the third last, where recovery starts): ``store salvage --out -`` writes them as JSON lines."""
    root = tmp_path_factory.mktemp("interrupted") / "store"
    records = _records(root)
    start = sorted({offset // FILE for offset, _ in records})[-3]
    offset, size = next(r for r in records if r[0] // FILE == start and r[0] % FILE)
    _damage(root, [(offset, size)], 0, (size + 16).to_bytes(4, "big"))
    with DefaultMessageStore(_config(root)):
        pass  # recovery
    return root


def _interrupted(cli_env: dict[str, str], *args: str, presses: int = 1) -> tuple[int, str, list[str]]:
    """Run ``mqctl args``, press Ctrl-C ``presses`` times once it is stuck writing its output, then read
    everything: ``(exit code, stdout, stderr lines)``."""
    proc = spawn(cli_env, *args)
    try:
        blocked_writing(proc)
        for press in range(presses):
            if press:
                time.sleep(0.3)
                assert proc.poll() is None, "the first Ctrl-C did not wait for the output"
            proc.send_signal(signal.SIGINT)
        if presses > 1:  # a reader that never reads: the second press alone ends it
            proc.wait(timeout=30)
        out, err = finish(proc, 60)
    finally:
        proc.kill()  # a no-op once it exited
    return proc.returncode, out, err.strip().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "yaml", "csv", "table"])
def test_ctrl_c_while_a_document_is_written_leaves_it_whole(
    cli_env: dict[str, str], corrupt: Path, fmt: str
) -> None:
    """The report (a JSON array, a YAML or CSV document, a table) arrives as an uninterrupted run prints it."""
    args = ("store", "verify", "--store", str(corrupt), "-o", fmt, "--max-problems", str(2 * RECORDS))
    whole = run_process(cli_env, *args)
    assert whole.code == 10 and len(whole.stdout) > 2 * FILE, whole.stderr
    code, out, err = _interrupted(cli_env, *args)
    assert code == 130, err
    assert err == ["mqctl: error: interrupted"]
    assert out == whole.stdout


@pytest.mark.slow
def test_ctrl_c_while_json_lines_are_written_leaves_whole_lines(
    cli_env: dict[str, str], quarantined: Path
) -> None:
    """``store salvage --out -``: the lines written so far, each whole, and not one more after Ctrl-C."""
    args = ("store", "salvage", "--store", str(quarantined), "--out", "-")
    whole = run_process(cli_env, *args)
    assert whole.code == 0 and len(whole.stdout) > 2 * FILE, whole.stderr
    code, out, err = _interrupted(cli_env, *args)
    assert code == 130, err
    assert err == ["mqctl: error: interrupted"]
    assert out.endswith("\n") and whole.stdout.startswith(out)
    assert all(json.loads(line) for line in out.splitlines())


@pytest.mark.slow
def test_a_second_ctrl_c_while_the_reader_never_reads_exits_at_once(
    cli_env: dict[str, str], corrupt: Path
) -> None:
    """The first press waits for the reader; the second ends the process: one line, 130, output cut."""
    args = ("store", "verify", "--store", str(corrupt), "-o", "json")
    code, out, err = _interrupted(cli_env, *args, presses=2)
    assert code == 130, err
    assert err == ["mqctl: error: interrupted twice while writing output: exiting now, output cut short"]
    assert len(out) <= 2 * FILE


@pytest.mark.slow
@pytest.mark.parametrize("pressed", [False, True], ids=["left", "ctrl-c-then-left"])
@pytest.mark.parametrize("lines", [True, False], ids=["json-lines", "document"])
def test_a_reader_that_leaves_is_no_error_but_a_ctrl_c_before_it_is_an_interrupt(
    cli_env: dict[str, str], corrupt: Path, quarantined: Path, lines: bool, pressed: bool
) -> None:
    """``mqctl store salvage --out - | head -c 100``, ``mqctl store verify -o json | head -c 100``: exit 0
    without a word, as a command that streams or one that writes a document at the end.

    Ctrl-C at a pipeline (``mqctl ... | jq``) while mqctl waits on its reader kills the reader too, and the
    write that waited then fails with EPIPE: the press was counted, then dropped as the closed pipe made a
    silent exit 0 (a script saw success). It is an interrupt: one line, exit 130, at the first press."""
    if lines:
        args = ("store", "salvage", "--store", str(quarantined), "--out", "-")
    else:
        args = ("store", "verify", "--store", str(corrupt), "-o", "json")
    proc = spawn(cli_env, *args)
    try:
        blocked_writing(proc)
        assert proc.stdout is not None and proc.stderr is not None
        if pressed:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
            assert proc.poll() is None, "the Ctrl-C did not wait for the output"
        assert proc.stdout.read(100).startswith("{")
        proc.stdout.close()
        _, err = finish(proc, 30)
        code = proc.returncode
    finally:
        proc.kill()  # a no-op once it exited
    assert (code, err) == ((130, "mqctl: error: interrupted\n") if pressed else (0, ""))


@pytest.mark.slow
def test_an_ignored_ctrl_c_stays_ignored(cli_env: dict[str, str], corrupt: Path) -> None:
    """``mqctl ... &`` from a script starts with SIGINT ignored: presses change nothing, even two while
    the output waits for its reader (they are not counted as a forced exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "store", "verify", "--store", str(corrupt), "-o", "json"],
        env=cli_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        blocked_writing(proc)
        for _ in range(2):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        assert proc.poll() is None
        out, err = finish(proc, 60)
    finally:
        proc.kill()  # a no-op once it exited
    # (the report's notes on stderr come first, then the one error line)
    assert proc.returncode == 10 and err.splitlines()[-1].startswith("mqctl: error: store "), err
    assert json.loads(out)["problems_found"] == RECORDS


#: A command whose closed pipe is unwinding (``BrokenPipeError`` being handled) when a Ctrl-C arrives.
UNWINDING_CHILD = """
import sys
import click
from mqctl.cli import app
from mqctl.errors import Interrupted

@click.command()
def tail():
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        # the press, while the closed pipe unwinds the command, as the root group turns it into
        raise Interrupted("interrupted") from None

app.command = lambda only=None: tail
sys.exit(app.main([]))
"""


def test_a_ctrl_c_while_a_closed_pipe_unwinds_the_command_is_an_interrupt() -> None:
    """The press raised while the BrokenPipeError was being handled carried it as its context, and the
    boundary took it for the closed pipe: exit 0, the Ctrl-C gone. It is the interrupt: one line, 130."""
    done = subprocess.run(
        [sys.executable, "-c", UNWINDING_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (130, "mqctl: error: interrupted\n")

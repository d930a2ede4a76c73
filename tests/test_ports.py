"""The suite's free ports come from outside the kernel's ephemeral range, where no client connection of
another test can take one between its choice and the daemon's bind."""

from __future__ import annotations

import socket

from mqctl.services.ports import ephemeral_low, free_block, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_free_block_is_whole_and_below_the_ephemeral_range() -> None:
    base = free_block(3)
    assert base + 3 <= ephemeral_low()
    socks = [socket.socket() for _ in range(3)]
    try:
        for i, s in enumerate(socks):
            s.bind(("127.0.0.1", base + i))
    finally:
        for s in socks:
            s.close()


def test_a_port_handed_out_is_not_handed_out_again_by_another_picker_before_its_daemon_binds() -> None:
    """Two pickers at once (two ``mqctl up``, two test workers) drew the same free block: each pick is
    reserved on the host, so a second picker (another process: a fresh interpreter) skips it."""
    import subprocess
    import sys

    base = free_block(6)
    probe = "import sys; from mqctl.services.ports import reserve; print(reserve(int(sys.argv[1]), 1))"
    for port in (base, base + 5):
        out = subprocess.run(
            [sys.executable, "-c", probe, str(port)], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False", out.stderr
    free = free_port()
    assert free != base
    out = subprocess.run([sys.executable, "-c", probe, str(free)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

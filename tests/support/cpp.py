"""The official C++ client (PyPI ``rocketmq==0.4.4`` in ``.venv-interop``, installed by
``scripts/install-interop-clients.sh``) driven through ``tests/interop/cpp_broker_roundtrip.py``."""

from __future__ import annotations

import json

import pytest

from tests.support.bounded import run_bounded
from tests.support.paths import ROOT

INTEROP_PYTHON = ROOT / ".venv-interop" / "bin" / "python"
INTEROP = ROOT / "tests" / "interop"
#: A run's allowance besides the consumer's wait: the client's starts and shutdowns, the producer's first
#: heartbeat tick (10 ms after its start, later on a loaded host) and its sends.
STARTS = 45.0
#: After the consumer's wait: the 6 s it leaves the client to commit its offsets, and its shutdown.
CONSUMER_AFTER = 15.0


def require_cpp_client() -> None:
    """Fail (not skip) without the client: the interop tests are part of the suite, and make test installs it."""
    if not INTEROP_PYTHON.exists():
        pytest.fail("C++ client venv missing: run scripts/install-interop-clients.sh (make test does)")


async def cpp_roundtrip(
    namesrv: str,
    topic: str,
    group: str,
    count: int,
    timeout: float,
    phases: str = "produce,consume",
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, object], str]:
    """Run the round trip (see its docstring): (exit code, its JSON result or {} on failure, stderr). Its
    consumer waits up to ``timeout`` s for the messages; the whole run is bounded (`run_bounded`): past
    its deadline the script prints the step it is in, its threads' stacks and the client's log errors."""
    require_cpp_client()
    deadline = STARTS + (timeout + CONSUMER_AFTER if "consume" in phases else 0)
    argv = [
        INTEROP_PYTHON,
        INTEROP / "cpp_broker_roundtrip.py",
        namesrv,
        topic,
        group,
        str(count),
        str(timeout),
    ]
    done = await run_bounded(
        [*argv, phases], deadline=deadline, what=f"the C++ client's {phases}", cwd=INTEROP, env=env
    )
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and done.returncode == 0 else {}
    return done.returncode, result, done.stderr

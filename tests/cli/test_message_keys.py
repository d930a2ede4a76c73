"""A message key holds no space, a tag no "||": RocketMQ's KEYS property is the keys joined by spaces
(``MessageConst#KEY_SEPARATOR``) and the IndexFile splits it there, so ``-k 'ord 1'`` was sent as two
keys, 'ord' and '1', and a query for 'ord 1' could never find anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import RunCli


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "send", "-t", "T", "-k", "ok", "-k", "ord 1", "body"),
        ("msg", "query", "-t", "T", "-k", "ord 1"),
        ("msg", "trace", "-k", "ord 1"),
        ("msg", "resend", "-g", "G", "-k", "ord 1"),
        ("dlq", "export", "-g", "G", "--out", "-", "-k", "ord 1"),
        ("store", "msg", "query", "--store", "{store}", "-t", "T", "-k", "ord 1"),
        ("msg", "query", "-t", "T", "-k", ""),
    ],
    ids=lambda args: " ".join(args[:2]) + (" blank" if args[-1] == "" else ""),
)
def test_a_key_with_a_space_or_a_blank_key_is_refused_before_any_request(
    cli: RunCli, tmp_path: Path, args: tuple[str, ...]
) -> None:
    online = () if args[0] == "store" else ("-n", "127.0.0.1:1")
    result = cli(*(a.format(store=tmp_path) for a in args), *online)
    assert result.code == 2, result
    [line] = result.stderr.splitlines()
    assert "--key" in line and ("space" in line or "blank" in line), line


def test_a_tag_holding_the_subscription_or_is_refused(cli: RunCli) -> None:
    """A message has one tag, and a subscription reads 'a||b' as 'a or b': a message tagged 'a||b' could be
    selected by no tag filter, only by '*'."""
    result = cli("msg", "send", "-t", "T", "--tag", "a||b", "body", "-n", "127.0.0.1:1")
    assert result.code == 2, result
    [line] = result.stderr.splitlines()
    assert "--tag" in line and "||" in line, line

"""``benchmarks/tools/dledger_instructions.py``: the calls it counts in a callgrind dump (a canned dump in
callgrind's format, names compressed as callgrind writes them: the reading, not valgrind, is under test)."""

from __future__ import annotations

from types import ModuleType

from tests.support.paths import script_module

# The read calls the push 3 times and again 2 times (the callee's name given once, then its id alone); the
# push recursing ('2) counts as the push; a wrapper whose name only starts alike is another function.
DUMP = """# callgrind format
events: Ir
fn=(1) CPyDef_connection___Connection___data_received
10 100
cfn=(2) CPyDef_server___DLedgerServer____serve_binary
calls=3 +5
* 700
cfn=(2)
calls=2 +7
* 400
cfn=(3) CPyDef_server___DLedgerServer____serve_binary'2
calls=1 +9
* 50
cfn=(4) CPyDef_server___DLedgerServer____serve_binary_json
calls=4 +9
* 80
fn=(2)
20 300
"""


def _module() -> ModuleType:
    return script_module("benchmarks/tools/dledger_instructions.py")


def test_calls_sums_every_call_of_the_function_by_name_or_id() -> None:
    assert _module().calls(DUMP, "CPyDef_server___DLedgerServer____serve_binary") == 3 + 2 + 1


def test_calls_of_a_function_never_called_is_zero() -> None:
    assert _module().calls(DUMP, "CPyDef_machines___Node___raw_push_answered") == 0


def test_inclusive_sums_the_cost_of_each_call_of_the_function() -> None:
    # the read's own 100 and the push's own 300 lines are not calls: only the calls' lines count
    assert _module().inclusive(DUMP, "CPyDef_server___DLedgerServer____serve_binary") == 700 + 400


def test_inclusive_leaves_out_another_function_named_alike() -> None:
    assert _module().inclusive(DUMP, "CPyDef_server___DLedgerServer____serve_binary_json") == 80

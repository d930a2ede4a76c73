"""``benchmarks/tools/send_counts.py``: a callgrind dump's costs by function and event, the simulated caches'
options, and the report's difference (canned dumps in callgrind's format: the reading, not valgrind, is
under test)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import script_module

# The cache simulator's events; main() calls helper() (the call's inclusive line must not count twice);
# helper is named once and referred to by its id after; positions absolute, relative and repeated; a
# line with fewer events than named has zeros for the rest.
DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 18446744073572414346

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) main
10 1000 300 100 1 20 5 1 4 2
+2 500 100
cfn=(2) helper
calls=3 +5
* 700 200 50 0 9 9 0 9 9
fn=(2) helper
20 300 60 30 0 7 1 0 3 1
fn=(1)
-1 25 5
"""


def _module() -> ModuleType:
    return script_module("benchmarks/tools/send_counts.py")


def test_function_costs_sums_each_functions_own_events() -> None:
    events, costs = _module().function_costs(DUMP)
    assert events == ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
    assert costs == {
        "main": [1525, 405, 100, 1, 20, 5, 1, 4, 2],
        "helper": [300, 60, 30, 0, 7, 1, 0, 3, 1],
    }
    assert _module().totals(events, costs)["D1mr"] == 27


def test_function_costs_reads_two_position_columns() -> None:
    text = "positions: instr line\nevents: Ir\nfn=(1) f\n0x10 3 7\n+2 -1 5\n"
    assert _module().function_costs(text) == (["Ir"], {"f": [12]})


def test_loop_instructions_counts_the_first_event_the_same_way() -> None:
    assert script_module("benchmarks/tools/loop_instructions.py").self_cost(DUMP) == 1525 + 300


def _cache_dir(root: Path) -> Path:
    for n, (level, kind, size, ways) in enumerate(
        [
            (1, "Data", "32K", 8),
            (1, "Instruction", "32K", 8),
            (2, "Unified", "512K", 8),
            (3, "Unified", "32768K", 16),
        ]
    ):
        index = root / f"index{n}"
        index.mkdir(parents=True)
        for name, value in [
            ("level", level),
            ("type", kind),
            ("size", size),
            ("ways_of_associativity", ways),
            ("coherency_line_size", 64),
        ]:
            (index / name).write_text(f"{value}\n")
    return root


def test_cache_sim_takes_this_cpus_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module()
    monkeypatch.setattr(module, "CACHE_DIR", _cache_dir(tmp_path))
    assert module.sim_options("cache", 3, "64,2048") == [
        "--cache-sim=yes",
        "--D1=32768,8,64",
        "--LL=33554432,16,64",
    ]
    assert module.sim_options("cache", 2, "64,2048")[2] == "--LL=524288,8,64"
    assert module.sim_options("none", 3, "64,2048") == []
    with pytest.raises(SystemExit, match="level-4"):
        module.sim_options("cache", 4, "64,2048")


def test_tlb_sim_is_the_cache_sim_with_page_lines() -> None:
    assert _module().sim_options("tlb", 3, "64,2048") == [
        "--cache-sim=yes",
        "--D1=262144,64,4096",
        "--LL=8388608,16,4096",
    ]


def test_report_gives_the_difference_per_send_by_function(capsys: pytest.CaptureFixture[str]) -> None:
    events = ["Ir", "D1mr"]
    one = (events, {"send": [1000, 10], "lookup": [200, 2]})
    many = (events, {"send": [1000, 30], "lookup": [260, 42], "grow": [40, 0]})
    _module().report({"one": one, "many": many}, count=10, top=5)
    out = capsys.readouterr().out
    assert "one: Ir 120.0, D1mr 1.2 a send" in out
    assert "many: Ir 130.0, D1mr 7.2 a send" in out
    assert "many less one, Ir: +10.00 a send" in out
    assert "many less one, D1mr: +6.00 a send" in out
    d1 = out[out.index("many less one, D1mr") :].splitlines()
    assert d1[1].split() == ["+4.00", "lookup"] and d1[2].split() == ["+2.00", "send"]


def test_report_refuses_a_side_with_nothing_collected() -> None:
    with pytest.raises(SystemExit, match="nothing collected on the one side"):
        _module().report({"one": (["Ir"], {})}, count=10, top=5)


def test_function_costs_takes_a_name_first_given_at_a_call() -> None:
    # callgrind names a function once, where its id first appears: here in a call, then fn=(2) alone
    text = "events: Ir D1mr\nfn=(1) main\n1 10 1\ncfn=(2) helper\ncalls=1 5\n5 40 4\nfn=(2)\n5 40 4\n"
    assert _module().function_costs(text) == (["Ir", "D1mr"], {"main": [10, 1], "helper": [40, 4]})

"""A member's ``perf record --call-graph dwarf`` folded by compiled function (``dledger_members.py --perf
ROLE --dwarf`` writes one).

    perf script -i perf-leader.data -F ip,sym | python benchmarks/tools/perf_fold.py [--top N] [--under FUNC]
        [--us-per-send US]

Each sample is charged to the innermost frame of a compiled module (mypyc's ``CPyDef_``/``CPyPy_``, uvloop's
Cython), with what ran below it (libpython, libc, the kernel: a page fault, a socket write's loopback
receive path) counted in it; the inclusive list counts each sample once in every compiled frame on its
stack. ``--under FUNC`` lists, for the samples with FUNC on the stack, the frame just below it (its
callees, compiled or not). ``--us-per-send`` turns the shares into microseconds per send (the member's
CPU per send from the same round, which perf's own overhead inflates a little).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Iterable, Iterator


def samples(lines: Iterable[str]) -> Iterator[list[str]]:
    """Each sample's frames, leaf first (``perf script -F ip,sym``: one frame a line, a blank line after)."""
    frames: list[str] = []
    for line in lines:
        parts = line.split()
        if not parts:
            if frames:
                yield frames
            frames = []
        elif line[:1] in "\t " and len(parts) >= 2:
            frames.append(parts[1].split("+")[0])
    if frames:
        yield frames


def compiled_name(sym: str) -> str | None:
    """A compiled function's readable name (``module___Class___method``), or None for any other frame."""
    if sym.startswith(("CPyDef_", "CPyPy_")):
        return re.sub(r"^CPy(Def|Py)_", "", sym)
    if "_6uvloop_4loop_" in sym:
        return "uvloop:" + re.sub(r".*_6uvloop_4loop_\d*", "", sym)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--under", help="the callees of this frame (a symbol as perf names it)")
    parser.add_argument("--us-per-send", type=float, default=0.0)
    args = parser.parse_args()
    inner: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    below: collections.Counter[str] = collections.Counter()
    total = 0
    for frames in samples(sys.stdin):
        total += 1
        names = [n for n in map(compiled_name, frames) if n is not None]
        inner[names[0] if names else f"[not compiled] {frames[0]}"] += 1
        inclusive.update(set(names))
        if args.under and args.under in frames:
            at = frames.index(args.under)
            below[frames[at - 1] if at else "(itself)"] += 1

    def show(title: str, counts: collections.Counter[str]) -> None:
        print(f"== {title}")
        for name, n in counts.most_common(args.top):
            us = f" {args.us_per_send * n / total:6.2f} µs" if args.us_per_send else ""
            print(f"{100 * n / total:6.2f}%{us}  {name}")

    print(f"{total} samples")
    if args.under:
        show(f"under {args.under}", below)
        return
    show("innermost compiled frame", inner)
    show("inclusive", inclusive)


if __name__ == "__main__":
    main()

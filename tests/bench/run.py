"""Run one EdgeFleet benchmark and print one JSON object.

Usage::

    python tests/bench/run.py --list
    python tests/bench/run.py NAME [--quick]

Each benchmark is a module ``tests/bench/bench_<name>.py`` with a function
``run(quick: bool) -> dict`` returning ``{"results": {...}, "goals": [...]}``.
A goal is ``{"id", "value", "target", "unit", "met"}``; ``met`` is computed here
from ``value``, ``target`` and the goal's ``"op"`` ("<=" or ">=", default "<=").
``--quick`` runs a reduced size so that CI can check every benchmark still works;
its figures are not the ones to quote.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def available() -> list[str]:
    """Names of the benchmarks found next to this file, sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def finish(name: str, outcome: dict) -> dict:
    """Normalise a benchmark's outcome into the runner's JSON shape."""
    goals = []
    for goal in outcome.get("goals", []):
        op = goal.pop("op", "<=")
        value, target = goal["value"], goal["target"]
        met = value is not None and (value <= target if op == "<=" else value >= target)
        goals.append({**goal, "op": op, "met": bool(met)})
    return {"name": name, "results": outcome.get("results", {}), "goals": goals}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", nargs="?", help="benchmark to run (see --list)")
    parser.add_argument("--quick", action="store_true", help="reduced size, for CI smoke runs")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list or not args.name:
        print("\n".join(available()))
        return 0 if args.list else 2
    if args.name not in available():
        parser.error(f"unknown benchmark {args.name!r}; choose from: {', '.join(available())}")
    sys.path.insert(0, str(ROOT))
    module = importlib.import_module(f"tests.bench.bench_{args.name}")
    print(json.dumps(finish(args.name, module.run(quick=args.quick)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

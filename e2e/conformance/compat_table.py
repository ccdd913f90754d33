#!/usr/bin/env python3
"""The README's compatibility table, made from the conformance results: one row per client with
the release that ran, its scenarios, and how many passed on Apache Kafka, on kaas in local mode
(`make conformance`: target/conformance/results.json) and on the 3-broker e2e cluster (`make
conformance-cluster`: target/conformance/cluster-results.json).

  compat_table.py --write README.md   replace the table between the README's markers
  compat_table.py --check README.md   exit 1 if the README's table is not what the results say

`make compat-table` writes it after both suites ran; `make test` checks it, so the README never
claims what the last run did not show. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BEGIN = "<!-- compatibility table: made by e2e/conformance/compat_table.py from the conformance results -->"
END = "<!-- end of the compatibility table -->"


def load(path: Path) -> list[dict] | None:
    if not path.exists():
        return None
    return json.loads(path.read_text())["rows"]


def verdicts(rows: list[dict], column: str) -> tuple[int, int, list[str]]:
    """(passed, ran, the failures with their reasons) of one broker's column."""
    ran = [r for r in rows if r[column] != "-"]
    passed = [r for r in ran if r[column] == "pass"]
    failed = [f"{r['scenario']} ({r[column].removeprefix('fail ').strip('()')})" for r in ran if r[column] != "pass"]
    return len(passed), len(ran), failed


def cell(rows: list[dict] | None, column: str) -> str:
    if rows is None:
        return "not run"
    passed, ran, failed = verdicts(rows, column)
    if ran == 0:
        return "not run"
    text = f"{passed}/{ran} pass"
    return text + ("; fails: " + ", ".join(failed) if failed else "")


def render(local: list[dict], cluster: list[dict] | None) -> str:
    clients: dict[str, list[dict]] = {}
    for r in local:
        clients.setdefault(r["client"], []).append(r)
    by_client_cluster: dict[str, list[dict]] = {}
    for r in cluster or []:
        by_client_cluster.setdefault(r["client"], []).append(r)
    out = [
        "| client | version | scenarios | Apache Kafka | kaas, local mode | kaas, 3-broker cluster |",
        "|---|---|---|---|---|---|",
    ]
    for client, rows in clients.items():
        scenarios = ", ".join(r["scenario"] for r in rows)
        on_cluster = by_client_cluster.get(client) if cluster is not None else None
        out.append(f"| {client} | {rows[0]['version']} | {scenarios} | {cell(rows, 'kafka')} | {cell(rows, 'kaas')} | "
                   f"{cell(on_cluster, 'kaas')} |")
    totals = [verdicts(local, "kaas")]
    if cluster is not None:
        totals.append(verdicts(cluster, "kaas"))
    summary = f"In all: kaas passes {totals[0][0]} of {totals[0][1]} scenarios in local mode"
    if len(totals) > 1:
        summary += f" and {totals[1][0]} of {totals[1][1]} on the 3-broker cluster"
    kafka = verdicts(local, "kafka")
    summary += f"; Apache Kafka {kafka[0]} of {kafka[1]}."
    return "\n".join([BEGIN, "", *out, "", summary, "", END])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--local", default=str(REPO / "target" / "conformance" / "results.json"))
    ap.add_argument("--cluster", default=str(REPO / "target" / "conformance" / "cluster-results.json"))
    ap.add_argument("readme", nargs="?", default=str(REPO / "README.md"))
    args = ap.parse_args()
    local = load(Path(args.local))
    if local is None:
        print(f"compat_table: no results in {args.local}: run `make conformance` first", file=sys.stderr)
        return 1
    table = render(local, load(Path(args.cluster)))
    readme = Path(args.readme)
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"compat_table: {readme} has no table markers", file=sys.stderr)
        return 1
    before, rest = text.split(BEGIN, 1)
    current, after = rest.split(END, 1)
    current = BEGIN + current + END
    if args.check:
        if current != table:
            print(f"compat_table: the compatibility table in {readme} is not what the last conformance runs show; "
                  "run `make compat-table` and commit the README", file=sys.stderr)
            return 1
        print(f"compat_table: {readme}'s table matches the results")
        return 0
    readme.write_text(before + table + after)
    print(f"compat_table: wrote the table into {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

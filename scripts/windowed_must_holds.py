"""Issue 16's must-holds for windowed, checked on a sweep's runs.csv, and the full table.

    python scripts/windowed_must_holds.py RUNS.csv [--cell PATH=VALUE] [--out FILE.md]

RUNS.csv is a `keepersim sweep` runs file over the built-in suite (scripts/sweeps/
windowed-tuning.json). ``--cell`` picks windowed's grid point (default: the row whose cells
equal the default params). Prints a markdown table: each scenario's mean miss rate under every
policy, then windowed's false exclusion, withheld weight, oracle efficiency and misses avoided
against gonka's; and the four checks:

- false exclusion (time-averaged healthy weight kept out) at most 1% on every scenario;
- at least as many misses avoided (none's misses - the policy's, per seed) as gonka everywhere;
- median oracle efficiency over the scenarios where it is defined at least 0.85;
- never above ``none`` on a capacity-limited fleet where overflow is a miss (``overload``).

Exit status: 0 all hold, 1 some do not, 2 bad input.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's keepersim, whatever PYTHONPATH says
    sys.path.insert(0, str(ROOT))

from keepersim.types.policies import NO_POLICY, ORACLE, POLICY_NAMES  # noqa: E402

#: The table's columns: no policy, the chain's policies in registry order, the oracle.
POLICIES = (NO_POLICY, *(p for p in POLICY_NAMES if p != NO_POLICY), ORACLE)
#: What a row must carry (a keepersim sweep's runs.csv has them all).
REQUIRED_COLUMNS = ("scenario", "policy", "seed", "misses", "miss_rate")
CAPACITY_MISS_SCENARIOS = ("overload",)  # overflow is a miss (overload_pushback declines)
FE_LIMIT = 0.01
EFFICIENCY_FLOOR = 0.85


def read_rows(
    path: Path, cell: tuple[str, str] | None
) -> dict[tuple[str, str], dict[int, dict[str, str]]]:
    """(scenario, policy) -> seed -> row; windowed only at ``cell`` (path, value)."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: not a sweep's runs.csv (no column {', '.join(missing)})")
        rows = list(reader)
    out: dict[tuple[str, str], dict[int, dict[str, str]]] = defaultdict(dict)
    for row in rows:
        if row.get("status") not in (None, "ok"):
            continue
        if row["policy"] == "windowed" and cell is not None and row.get(cell[0]) != cell[1]:
            continue
        out[(row["scenario"], row["policy"])][int(row["seed"])] = row
    return out


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def format_gas_table(
    data: dict[tuple[str, str], dict[int, dict[str, str]]], scenarios: list[str]
) -> list[str]:
    """Gas per inference of each policy (mean over the seeds every policy ran) and, in
    parentheses, what it adds over none on the same seeds (docs/metrics.md, "Gas"); a runs.csv
    from before gas says so instead."""
    if not any(row.get("gas_per_inference") for runs in data.values() for row in runs.values()):
        return ["Gas: this runs.csv has no gas_per_inference column (recorded before gas)."]
    lines = [
        'Gas per inference (SDK KV gas over keepersim\'s keys; docs/metrics.md, "Gas"), '
        "and over none on the same seeds:",
        "",
        "| scenario | " + " | ".join(POLICIES) + " |",
        "|---|" + "---|" * len(POLICIES),
    ]
    for scenario in scenarios:
        runs = {p: data.get((scenario, p), {}) for p in POLICIES}
        seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
        if not seeds:
            continue
        gas = {
            p: mean([float(runs[p][s].get("gas_per_inference") or "nan") for s in seeds])
            for p in POLICIES
        }
        cells = [
            "-" if math.isnan(gas[p]) else f"{gas[p]:,.0f} ({gas[p] - gas['none']:+,.0f})"
            for p in POLICIES
        ]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--cell", default=None, help="windowed's grid point as PATH=VALUE")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = parser.parse_args()
    cell = None
    if args.cell:
        if "=" not in args.cell:
            print(f"--cell: expected PATH=VALUE, got {args.cell!r}", file=sys.stderr)
            return 2
        path, value = args.cell.split("=", 1)
        cell = (path, value)
    if not args.runs.is_file():
        print(f"{args.runs}: no such file", file=sys.stderr)
        return 2
    try:
        data = read_rows(args.runs, cell)
    except (ValueError, csv.Error) as exc:
        print(exc, file=sys.stderr)
        return 2
    scenarios = list(dict.fromkeys(s for s, _ in data))
    lines = [
        "| scenario | "
        + " | ".join(POLICIES)
        + " | FE windowed | withheld windowed | eff. windowed | avoided windowed / gonka |",
        "|---|" + "---|" * (len(POLICIES) + 4),
    ]
    failures: list[str] = []
    efficiencies: list[float] = []
    for scenario in scenarios:
        runs = {p: data.get((scenario, p), {}) for p in POLICIES}
        seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
        if not seeds:
            continue
        rate = {p: mean([float(runs[p][s]["miss_rate"]) for s in seeds]) for p in POLICIES}
        misses = {p: {s: int(float(runs[p][s]["misses"])) for s in seeds} for p in POLICIES}
        fe = mean([float(runs["windowed"][s]["false_exclusion_weight_share"]) for s in seeds])
        # (a sweep from before the metric has no withheld column: shown as "-")
        withheld = mean(
            [float(runs["windowed"][s].get("withheld_weight_share") or "nan") for s in seeds]
        )
        avoided = {
            p: mean([misses["none"][s] - misses[p][s] for s in seeds])
            for p in ("gonka", "windowed")
        }
        effs = [
            (misses["none"][s] - misses["windowed"][s]) / (misses["none"][s] - misses["oracle"][s])
            for s in seeds
            if misses["none"][s] > misses["oracle"][s]
        ]
        eff = mean(effs) if len(effs) == len(seeds) else math.nan
        if not math.isnan(eff):
            efficiencies.append(eff)
        if fe > FE_LIMIT:
            failures.append(f"{scenario}: false exclusion {fe:.2%} > 1%")
        if avoided["windowed"] < avoided["gonka"]:
            failures.append(
                f"{scenario}: windowed avoids {avoided['windowed']:.1f} misses, gonka "
                f"{avoided['gonka']:.1f}"
            )
        if scenario in CAPACITY_MISS_SCENARIOS and rate["windowed"] > rate["none"]:
            failures.append(
                f"{scenario}: windowed {rate['windowed']:.2%} above none {rate['none']:.2%}"
            )
        cells = " | ".join(f"{rate[p]:.2%}" for p in POLICIES)
        shown_eff = "-" if math.isnan(eff) else f"{eff:.2f}"
        lines.append(
            f"| {scenario} | {cells} | {fe:.2%} | "
            + ("-" if math.isnan(withheld) else f"{withheld:.2%}")
            + f" | {shown_eff} | "
            f"{avoided['windowed']:.1f} / {avoided['gonka']:.1f} |"
        )
    median = statistics.median(efficiencies) if efficiencies else math.nan
    if not median >= EFFICIENCY_FLOOR:
        failures.append(f"median oracle efficiency {median:.3f} < {EFFICIENCY_FLOOR}")
    lines += [
        "",
        f"Median oracle efficiency of windowed: {median:.3f} over {len(efficiencies)} scenarios.",
    ]
    lines += ["", "Must-holds: " + ("all hold." if not failures else "not held:")]
    lines += [f"- {f}" for f in failures]
    lines += ["", *format_gas_table(data, scenarios)]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

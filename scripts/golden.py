"""Golden outputs: the app hash and metrics of every built-in scenario x policy (seed 1, memory
store), recorded before a refactor and checked after it.

    python scripts/golden.py record [--out FILE] [--seed N] [--jobs N] [--scenarios S ...]
                                    [--policies P ...]
    python scripts/golden.py check [--golden FILE] [--jobs N] [--ignore FIELD ...]
                                   [--add-new-fields] [...]

``--seed N`` records another seed (a wider check than the committed seed-1 file, e.g. recorded
at the commit before a refactor); ``check`` re-runs the seed its golden file records.

``--add-new-fields``: a metric added since the recording (e.g. gas) is not a difference; if
every recorded field still matches, the new fields are written into the golden file.

A run is kept as a flat record: every scalar of the run JSON (``RunResult.to_dict()``) under its
dotted name (``detection_delay.median``), each list as the sha256 of its canonical JSON plus its
length (``timeline.sha256``, ``timeline.len``), minus the wall-clock fields. Runs are
deterministic, so floats are compared exactly (no tolerance): any difference is a change.

Scenario generation draws from numpy's random generators, so the file records the numpy
version; a different numpy build may give other scenarios (and so other outputs) without any
change to keepersim. ``check`` warns when the versions differ.

Exit status of ``check``: 0 every run equal, 1 something differs, 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # import this checkout's keepersim, whatever PYTHONPATH says
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from keepersim.outputs import OutputPathError, check_output_file, write_json_atomic  # noqa: E402
from keepersim.types.policies import DEVSHARD_LIMITER, RUN_POLICIES  # noqa: E402

FORMAT = "keepersim-golden/1"
DEFAULT_GOLDEN = ROOT / "tests" / "golden" / "builtin-seed1.json"
SEED = 1
STORE: Final = "memory"
#: Every policy a run can use (the chain's registry plus the oracle baseline), less
#: ``devshard-limiter``: the built-in scenarios are classic traffic, where it is ``none``
#: exactly (tests/sim/test_devshard_path.py checks the app hashes are equal).
POLICIES: Final = tuple(p for p in RUN_POLICIES if p != DEVSHARD_LIMITER)
# Time-based (wall clock) or environment-dependent: never part of a run's identity.
DROPPED_FIELDS = ("wall_seconds", "inferences_per_second", "blocks_per_second", "trace_path")
NOTE = (
    "Golden outputs of scripts/golden.py: every built-in scenario x policy, seed 1, memory "
    "store. Floats are compared exactly (runs are deterministic). Scenario generation uses "
    "numpy's random generators: a different numpy version may change the scenarios and so "
    "every output without any change to keepersim; re-record with the numpy given here."
)


class GoldenInputError(Exception):
    """Bad input (flag, file): one line, exit status 2."""


def get_run_key(scenario: str, policy: str) -> str:
    return f"{scenario}/{policy}"


def compute_digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value`` (sorted keys, no spaces, exact float repr)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compute_golden_record(run: Mapping[str, Any]) -> dict[str, Any]:
    """The flat record kept for one run JSON: scalars by dotted name, lists as digest + length,
    wall-clock fields dropped."""
    out: dict[str, Any] = {}

    def walk(prefix: str, data: Mapping[str, Any]) -> None:
        for key, value in data.items():
            name = f"{prefix}{key}"
            if not prefix and key in DROPPED_FIELDS:
                continue
            if isinstance(value, Mapping):
                walk(f"{name}.", value)
            elif isinstance(value, list | tuple):
                out[f"{name}.len"] = len(value)
                out[f"{name}.sha256"] = compute_digest(value)
            else:
                out[name] = value

    walk("", run)
    return dict(sorted(out.items()))


def _is_ignored(field: str, ignore: Iterable[str]) -> bool:
    return any(field == i or field.startswith(i + ".") for i in ignore)


def compute_differences(
    old: Mapping[str, Mapping[str, Any]],
    new: Mapping[str, Mapping[str, Any]],
    ignore: Iterable[str] = (),
) -> dict[str, list[tuple[str, Any, Any]]]:
    """Per run key, the fields that differ as ``(field, old, new)`` (``None`` for absent;
    a run present on one side only is the field ``<run>``). ``ignore`` names fields or dotted
    prefixes (``detection_delay`` covers ``detection_delay.median``). Exact comparison: the
    runs are deterministic, so ``0.1 != 0.1000000001``."""
    ignored = tuple(ignore)
    diffs: dict[str, list[tuple[str, Any, Any]]] = {}
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            diffs[key] = [
                ("<run>", "present" if key in old else None, "present" if key in new else None)
            ]
            continue
        a, b = old[key], new[key]
        changed = [
            (f, a.get(f), b.get(f))
            for f in sorted(set(a) | set(b))
            if not _is_ignored(f, ignored)
            and (f not in a or f not in b or not _is_same(a[f], b[f]))
        ]
        if changed:
            diffs[key] = changed
    return diffs


def _is_same(a: Any, b: Any) -> bool:
    """Exact: the same JSON text (float repr round-trips, so no tolerance; ``1`` vs ``1.0`` or
    ``true`` vs ``1`` is a change, as it is in the run JSON)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def compute_report(diffs: Mapping[str, Sequence[tuple[str, Any, Any]]]) -> str:
    """The differences as a table: run, field, old -> new (empty string when none)."""
    rows = [(run, f, _show(o), _show(n)) for run, fs in diffs.items() for f, o, n in fs]
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in [("run", "field", "", ""), *rows]) for i in (0, 1)]
    lines = [f"{'run'.ljust(widths[0])}  {'field'.ljust(widths[1])}  old -> new"]
    lines += [f"{r.ljust(widths[0])}  {f.ljust(widths[1])}  {o} -> {n}" for r, f, o, n in rows]
    return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    return json.dumps(value)


def get_task(scenario: str, policy: str, seed: int = SEED) -> Any:
    """The run ``keepersim simulate S --policy P --seed N --store memory`` makes, as a task."""
    from keepersim.runs import make_task

    return make_task(scenario, policy, seed, label=scenario, store=STORE)


def get_golden_run_record(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run record (compare's, which adds ``scenario_name``) as the golden file keeps it."""
    return compute_golden_record({k: v for k, v in run.items() if k != "scenario_name"})


def compute_run(scenario: str, policy: str) -> dict[str, Any]:
    """One built-in run, in this process, as its golden record."""
    from keepersim.runs import execute_runs

    (run,) = execute_runs([get_task(scenario, policy)], 1, False)
    return get_golden_run_record(run)


def get_header(seed: int = SEED) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "note": NOTE,
        "keepersim_commit": _get_commit(),
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "seed": seed,
        "store": STORE,
        "dropped_fields": list(DROPPED_FIELDS),
    }


def _get_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def process_runs(
    pairs: Sequence[tuple[str, str]], jobs: int, progress: bool = True, seed: int = SEED
) -> dict[str, dict[str, Any]]:
    """Every (scenario, policy) pair's golden record by run key, sorted; the runs go to
    keepersim.runs' process engine (``jobs`` worker processes, progress lines on stderr)."""
    from keepersim.runs import execute_runs

    runs = execute_runs([get_task(s, p, seed) for s, p in pairs], max(1, jobs), progress)
    return dict(
        sorted((get_run_key(r["scenario"], r["policy"]), get_golden_run_record(r)) for r in runs)
    )


def get_pairs(
    scenarios: Sequence[str] | None, policies: Sequence[str] | None
) -> list[tuple[str, str]]:
    """The (scenario, policy) pairs to run; raises :class:`GoldenInputError` on unknown names."""
    from keepersim.sim.suite import list_builtin_scenarios

    known = list_builtin_scenarios()
    chosen_s = list(scenarios) if scenarios else known
    chosen_p = list(policies) if policies else list(POLICIES)
    for s in chosen_s:
        if s not in known:
            raise GoldenInputError(
                f"--scenarios: unknown built-in scenario {s!r}; known: {', '.join(known)}"
            )
    for p in chosen_p:
        if p not in POLICIES:
            raise GoldenInputError(
                f"--policies: unknown policy {p!r}; known: {', '.join(POLICIES)}"
            )
    return [(s, p) for s in chosen_s for p in chosen_p]


def load_golden(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The golden file at ``path``; raises :class:`GoldenInputError` naming what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise GoldenInputError(
            f"--golden: cannot read {os.fspath(path)!r}: {exc.strerror or exc}"
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenInputError(
            f"{os.fspath(path)}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GoldenInputError(
            f'{os.fspath(path)}: not a golden file (expected "format": "{FORMAT}")'
        )
    runs = data.get("runs")
    if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
        raise GoldenInputError(
            f'{os.fspath(path)}: field "runs": expected an object of run records'
        )
    return data


def _cmd_record(args: argparse.Namespace) -> int:
    pairs = get_pairs(args.scenarios, args.policies)
    try:
        check_output_file(args.out, "--out")
    except OutputPathError as exc:
        raise GoldenInputError(str(exc)) from exc
    started = time.monotonic()
    runs = process_runs(pairs, args.jobs, seed=args.seed)
    write_json_atomic(args.out, {**get_header(args.seed), "runs": runs})
    print(
        f"recorded {len(runs)} runs in {time.monotonic() - started:.0f}s to {args.out}",
        file=sys.stderr,
    )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    golden = load_golden(args.golden)
    pairs = get_pairs(args.scenarios, args.policies)
    filtered = bool(args.scenarios or args.policies)
    wanted = {get_run_key(s, p) for s, p in pairs}
    if filtered:
        missing = sorted(wanted - set(golden["runs"]))
        if missing:
            raise GoldenInputError(f"{args.golden}: no golden record for {', '.join(missing)}")
    if golden.get("numpy_version") != np.__version__:
        print(
            f"warning: golden recorded with numpy {golden.get('numpy_version')}, this is "
            f"numpy {np.__version__}; scenarios may differ",
            file=sys.stderr,
        )
    fields = {f for record in golden["runs"].values() for f in record}
    for name in args.ignore:
        if not any(_is_ignored(f, (name,)) for f in fields):
            raise GoldenInputError(f"--ignore: {name!r} names no field of {args.golden}")
    seed = golden.get("seed", SEED)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise GoldenInputError(f'{args.golden}: field "seed": expected an integer >= 0')
    runs = process_runs(pairs, args.jobs, seed=seed)
    old = {k: v for k, v in golden["runs"].items() if k in wanted} if filtered else golden["runs"]
    compared = runs
    if args.add_new_fields:
        # Only what the golden file records is compared; the rest is added to it below.
        compared = {k: {f: v for f, v in r.items() if f in old.get(k, r)} for k, r in runs.items()}
    diffs = compute_differences(old, compared, ignore=args.ignore)
    if diffs:
        print(compute_report(diffs))
        print(f"{len(diffs)} of {len(old)} runs differ from {args.golden}", file=sys.stderr)
        return 1
    print(f"all {len(runs)} runs equal {args.golden}", file=sys.stderr)
    if args.add_new_fields:
        merged = {
            k: dict(sorted({**runs.get(k, {}), **v}.items())) for k, v in golden["runs"].items()
        }
        write_json_atomic(args.golden, {**golden, "runs": merged})
        print(f"added the runs' new fields to {args.golden}", file=sys.stderr)
    return 0


def _jobs(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="golden.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--jobs",
        type=_jobs,
        default=os.cpu_count() or 1,
        help="worker processes (default: every core)",
    )
    common.add_argument(
        "--scenarios", nargs="+", metavar="S", help="built-in scenarios (default: all)"
    )
    common.add_argument("--policies", nargs="+", metavar="P", help="policies (default: all)")
    rec = sub.add_parser(
        "record", parents=[common], help="run everything and write the golden file"
    )
    rec.add_argument("--out", default=str(DEFAULT_GOLDEN), help="golden file to write")
    rec.add_argument(
        "--seed",
        type=_seed,
        default=SEED,
        help=f"the runs' seed (default {SEED}, the committed file's); check re-runs the seed "
        "the golden file records",
    )
    chk = sub.add_parser("check", parents=[common], help="re-run and compare with the golden file")
    chk.add_argument("--golden", default=str(DEFAULT_GOLDEN))
    chk.add_argument(
        "--ignore",
        action="extend",
        nargs="+",
        default=[],
        metavar="FIELD",
        help="fields (or dotted prefixes) not compared, e.g. app_hash",
    )
    chk.add_argument(
        "--add-new-fields",
        action="store_true",
        help="compare only the fields the golden file has; if every run equals it, write the "
        "runs' new fields (a metric added since the recording) into it",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _cmd_record(args) if args.command == "record" else _cmd_check(args)
    except GoldenInputError as exc:
        print(f"golden.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

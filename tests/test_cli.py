"""The keepersim command: subcommands, outputs, and exit status 2 on bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from keepersim import cli
from keepersim.sim.scenario import format_scenario_json, load_scenario, parse_scenario

TINY: dict[str, Any] = {
    "name": "cli_tiny",
    "seed": 2,
    "blocks": 120,
    "epoch_length": 60,
    "expiration_blocks": 10,
    "arrivals_per_block": 1.5,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 700, "miss": [[0, 0.0], [30, 0.9]]},
    ],
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(format_scenario_json(parse_scenario(TINY, "test")))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_simulate_writes_the_result(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    out_file = tmp_path / "result.json"
    trace = tmp_path / "trace.jsonl"
    status, out, err = run(
        capsys,
        "simulate",
        str(tiny),
        "--policy",
        "gonka",
        "--store",
        "memory",
        "--out",
        str(out_file),
        "--trace-out",
        str(trace),
        "--no-progress",
    )
    assert status == 0, err
    assert "miss_rate" in out and "app_hash" in out
    result = json.loads(out_file.read_text())
    for key in ("scenario", "policy", "seed", "inferences", "misses", "miss_rate"):
        assert key in result
    for key in ("fallback_selections", "false_exclusion_weight_share", "app_hash"):
        assert key in result
    assert result["policy"] == "gonka" and result["seed"] == 2
    assert json.loads(trace.read_text().splitlines()[0])["type"] == "header"


def test_simulate_seed_and_governance(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    gov = tmp_path / "gov.json"
    gov.write_text(
        json.dumps([{"height": 50, "set": {"extension_params.health_params.policy": "gonka"}}])
    )
    status, _, err = run(
        capsys,
        "simulate",
        str(tiny),
        "--policy",
        "none",
        "--seed",
        "9",
        "--store",
        "memory",
        "--governance",
        str(gov),
        "--out",
        str(tmp_path / "r.json"),
    )
    assert status == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["seed"] == 9
    assert result["governance_heights"] == [50]
    assert result["excluded_weight_share"] > 0  # gonka took over at 51


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (
            {"set": {"extension_params.health_params.policy": "oracle"}},
            "health_params.policy='oracle'",
        ),
        ({"set": {"params.authority": "gonka1someoneelse"}}, "no field 'authority'"),
        (
            {"set": {"health_params.policy": "gonka"}},
            "did you mean extension_params.health_params.policy?",
        ),
        ({"params": {"authority": "gonka1someoneelse"}}, "authority"),
    ],
)
def test_simulate_governance_cannot_select_oracle_or_authority(
    tiny: Path, tmp_path: Path, capsys: Any, entry: dict[str, Any], named: str
) -> None:
    """The oracle is the simulator's, the authority the module's: neither is a param."""
    gov = tmp_path / "gov.json"
    gov.write_text(json.dumps([{"height": 5, **entry}]))
    argv = ["simulate", str(tiny), "--store", "memory", "--governance", str(gov)]
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert named in err and "gov.json[0]" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "no_such_scenario"], "neither a built-in scenario"),
        (["simulate", "{tiny}", "--policy", "bogus"], "unknown policy 'bogus'"),
        (["simulate", "{bad}"], "missing required key"),
        (
            ["simulate", "{tiny}", "--governance", "{missing}"],
            "missing.json: cannot read the governance file: no such file",
        ),
        (["simulate", "{tiny}", "--governance", "{badjson}"], "invalid JSON at line 1"),
        (
            ["simulate", "{tiny}", "--governance", "{badrule}"],
            "extension_params.cb_miss_threshold_pct=101 breaks rule: in [1, 100]",
        ),
        (["simulate", "{tiny}", "--governance", "{late}"], "beyond the run's last block 120"),
        (["simulate", "{tiny}", "--store", "memory", "--store-dir", "x"], "--store-dir needs"),
        (["compare", "{tiny}", "--policies", "gonka,bogus"], "unknown policy 'bogus'"),
        (["compare", "{tiny}", "--seeds", "0"], "argument --seeds: expected an integer >= 1"),
        (["compare", "nowhere.json"], "neither a built-in"),
        (["scenarios", "generate", "--participants", "0"], "participants"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    argv: list[str], message: str, tiny: Path, tmp_path: Path, capsys: Any
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    badjson = tmp_path / "badjson.json"
    badjson.write_text("[{")
    badrule = tmp_path / "badrule.json"
    badrule.write_text(
        json.dumps([{"height": 5, "set": {"extension_params.cb_miss_threshold_pct": 101}}])
    )
    late = tmp_path / "late.json"
    late.write_text(
        json.dumps([{"height": 500, "set": {"params.validation_params.expiration_blocks": 5}}])
    )
    names = {
        "tiny": tiny,
        "bad": bad,
        "badjson": badjson,
        "badrule": badrule,
        "late": late,
        "missing": tmp_path / "missing.json",
    }
    status, _, err = run(capsys, *[a.format(**names) for a in argv])
    assert status == 2
    assert message in err
    assert err.startswith("keepersim: error: ")
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys: Any) -> None:
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "simulate")[0] == 2  # missing SCENARIO
    assert run(capsys, "simulate", "x", "--store", "disk")[0] == 2
    assert run(capsys, "scenarios")[0] == 2
    status, _, err = run(capsys)
    assert status == 2 and "COMMAND" in err
    assert run(capsys, "--help")[0] == 0


def test_help_documents_the_governance_format(capsys: Any) -> None:
    status, out, _ = run(capsys, "simulate", "--help")
    assert status == 0
    assert '"set"' in out and "dotted field paths" in out


def test_scenarios_list_and_generate(tmp_path: Path, capsys: Any) -> None:
    status, out, _ = run(capsys, "scenarios", "list")
    assert status == 0
    assert "mainnet_like" in out and "overload_pushback" in out
    path = tmp_path / "gen.json"
    status, out, err = run(
        capsys,
        "scenarios",
        "generate",
        "--seed",
        "4",
        "--out",
        str(path),
        "--name",
        "g",
        "--participants",
        "12",
        "--blocks",
        "300",
        "--degraded-miss",
        "0.2,0.4",
        "--latency",
        "1,3",
    )
    assert status == 0, err
    s = load_scenario(path)
    assert (s.name, s.seed, len(s.participants), s.blocks) == ("g", 4, 12, 300)
    assert all((p.latency_min, p.latency_max) == (1, 3) for p in s.participants)
    status, out, _ = run(capsys, "scenarios", "generate", "--builtin", "sparse", "--seed", "2")
    assert status == 0 and json.loads(out)["name"] == "sparse"


def test_compare_command(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    out_dir = tmp_path / "rep"
    status, out, err = run(
        capsys,
        "compare",
        str(tiny),
        "--policies",
        "gonka",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--store",
        "memory",
        "--out",
        str(out_dir),
        "--no-plots",
        "--no-progress",
    )
    assert status == 0, err
    assert "oracle eff." in out and "3 runs in" in out
    assert (out_dir / "report.json").exists() and (out_dir / "summary.csv").exists()
    assert not list(out_dir.glob("*.png"))


def test_compare_defaults(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_compare(scenarios: Any, policies: Any, seeds: Any, out_dir: Any, **kw: Any) -> Any:
        calls.append((scenarios, policies, seeds, out_dir))
        return {"runs": []}

    monkeypatch.setattr("keepersim.runs.compare.compare", fake_compare)
    status, _, _ = run(capsys, "compare")
    assert status == 0
    scenarios, policies, seeds, out_dir = calls[0]
    assert scenarios == ["mainnet_like"]
    assert seeds == 3 and out_dir == "keepersim-report"
    from keepersim.keeper.policies import BUILTIN_POLICIES

    assert set(policies) == {*BUILTIN_POLICIES, "oracle", "devshard-limiter"}


def test_commands_are_a_registry(capsys: Any) -> None:
    assert cli.add_simulate_command in cli.COMMANDS
    assert cli.add_compare_command in cli.COMMANDS

    def handler(args: argparse.Namespace) -> int:
        print(f"hello {args.who}")
        return 0

    def add_hello_command(subparsers: Any) -> None:
        parser = subparsers.add_parser("hello", help="say hello")
        parser.add_argument("who")
        parser.set_defaults(handler=handler)

    cli.register_command(add_hello_command)
    try:
        status, out, _ = run(capsys, "hello", "world")
        assert status == 0 and out == "hello world\n"
    finally:
        cli.COMMANDS.remove(add_hello_command)


@pytest.mark.parametrize("weighting", [False, True])
def test_simulate_reputation_weighting_reaches_the_chain(
    tiny: Path, tmp_path: Path, capsys: Any, weighting: bool
) -> None:
    """The flag is in the stored chain's params, also after a governance update (which patches
    the params the run starts with), and the run names its selection rule."""
    from keepersim.chain import Chain
    from keepersim.keeper.selection import SELECTION_BY_REPUTATION, SELECTION_BY_WEIGHT

    gov = tmp_path / "gov.json"
    gov.write_text(
        json.dumps([{"height": 50, "set": {"extension_params.health_params.policy": "gonka"}}])
    )
    store = tmp_path / "chain"
    flag = ["--reputation-weighting"] if weighting else []
    status, out, err = run(
        capsys,
        "simulate",
        str(tiny),
        "--policy",
        "none",
        "--store-dir",
        str(store),
        "--governance",
        str(gov),
        "--out",
        str(tmp_path / "r.json"),
        "--no-progress",
        *flag,
    )
    assert status == 0, err
    rule = SELECTION_BY_REPUTATION if weighting else SELECTION_BY_WEIGHT
    assert json.loads((tmp_path / "r.json").read_text())["selection"] == rule
    assert any(line.split(None, 1) == ["selection", rule] for line in out.splitlines())
    with Chain.open(store) as chain:
        params = chain.get_params()
    # the governance update was applied
    assert params.extension_params.health_params.policy == "gonka"
    assert params.extension_params.reputation_weighting is weighting


def test_compare_reputation_weighting_flag(tiny: Path, tmp_path: Path, capsys: Any) -> None:
    from keepersim.keeper.selection import SELECTION_BY_REPUTATION

    out_dir = tmp_path / "rep"
    argv = ["compare", str(tiny), "--policies", "gonka", "--seeds", "1", "--jobs", "1"]
    argv += ["--store", "memory", "--out", str(out_dir), "--no-plots", "--no-progress"]
    status, out, err = run(capsys, *argv, "--reputation-weighting")
    assert status == 0, err
    report = json.loads((out_dir / "report.json").read_text())
    assert report["config"]["selection"] == SELECTION_BY_REPUTATION
    assert {r["selection"] for r in report["runs"]} == {SELECTION_BY_REPUTATION}
    assert out.splitlines()[0] == report["config"]["baselines"]


@pytest.mark.parametrize("preset", ["default", "mainnet"])
def test_params_prints_the_chains_rest_shape_with_the_extension_beside(
    preset: str, capsys: Any, tmp_path: Path
) -> None:
    """`keepersim params` answers like the chain's /params ({"params": ...}: every field of the
    chain's Params, 64-bit integers as strings, an unset message as null) plus keepersim's
    extension params, and the JSON reads back into the preset's params."""
    from keepersim.types.chain_json import parse_chain_json
    from keepersim.types.messages import Params
    from keepersim.types.params import get_preset_params

    status, out, err = run(capsys, "params", "--preset", preset)
    assert status == 0, err
    data = json.loads(out)
    assert set(data) == {"params", "extension_params"}
    chain = data["params"]
    assert list(chain) == [f.name for f in Params.DESCRIPTOR.fields]
    if preset == "default":  # DefaultParams() leaves it nil; the gateway prints null
        assert chain["fee_params"] is None
    assert isinstance(chain["validation_params"]["expiration_blocks"], str)
    expected = get_preset_params(preset)
    assert parse_chain_json(chain, Params, where="params") == expected.params
    assert data["extension_params"]["health_params"]["policy"] == "gonka"
    assert data["extension_params"]["reputation_weighting"] is False
    target = tmp_path / "p.json"
    assert run(capsys, "params", "--preset", preset, "--out", str(target))[0] == 0
    assert json.loads(target.read_text()) == data
    if preset == "mainnet":
        assert chain["validation_params"]["expiration_blocks"] == "150"
        assert chain["epoch_params"]["epoch_length"] == "15391"  # the live network's

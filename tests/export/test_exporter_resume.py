"""A stopped export continues where it stopped: the same trace as an uninterrupted run, with no
duplicate and no lost record; a progress file of another export is refused; a process killed
mid-export (SIGKILL) and rerun also gives the same trace."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_server import make_demo_scenario, simulate_chain
from export_kill import run_export_until_killed

from keepersim.chain import Chain
from keepersim.export.export_run import ExportError, ExportOptions
from keepersim.export.exporter import export_trace
from keepersim.server.app import BackgroundServer, create_app
from keepersim.server.faults import FaultInjector, parse_fault_spec

OPTIONS = ExportOptions(page_limit=20, backoff_base=0.001, backoff_cap=0.004, timeout=10.0)


class Stop(Exception):
    """Stands for a crash at a unit boundary."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Chain, str, bytes]]:
    folder = tmp_path_factory.mktemp("resume")
    scenario = make_demo_scenario(
        participants=10, blocks=250, epoch_length=100, arrivals_per_block=3
    )
    chain_dir, _ = simulate_chain(folder, scenario, trace=False)
    chain = Chain.open(chain_dir)
    with BackgroundServer(create_app(chain)) as server:
        out = folder / "baseline.jsonl"
        export_trace(server.url, (0, 2), out, options=OPTIONS)
        baseline = out.read_bytes()
        # Whole: the closing record counts the lines before it and holds their SHA-256, so a
        # resumed export equal to it ends with a correct closing record over the whole file.
        body = baseline[: baseline.rindex(b"\n", 0, len(baseline) - 1) + 1]
        assert json.loads(baseline[len(body) :]) == {
            "type": "end",
            "lines": body.count(b"\n"),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        yield chain, server.url, baseline
    chain.close()


def count_units(progress: Path) -> int:
    data = json.loads(progress.read_text())
    pages = sum(len(v["pages"]) for v in data["listings"].values())
    return pages + len(data["summaries"]) + (1 if data["snapshot"] else 0)


@pytest.mark.parametrize("stop_after", [1, 2, 5, 17, 10_000])
def test_stopped_export_resumes_to_the_same_trace(
    served: tuple[Chain, str, bytes], tmp_path: Path, stop_after: int
) -> None:
    _, url, baseline = served
    out = tmp_path / "trace.jsonl"
    progress = out.with_name(out.name + ".progress.json")
    seen: list[tuple[str, str]] = []

    def crash(kind: str, detail: str) -> None:
        seen.append((kind, detail))
        if len(seen) >= stop_after:
            raise Stop(f"stopped after {kind} {detail}")

    if stop_after == 10_000:
        # stop at the very last unit, after everything was fetched but before the assembly
        probe = tmp_path / "probe.jsonl"
        counted: list[str] = []
        export_trace(url, (0, 2), probe, options=OPTIONS, on_unit=lambda k, d: counted.append(k))
        stop_after = len(counted)
    with pytest.raises(Stop):
        export_trace(url, (0, 2), out, options=OPTIONS, on_unit=crash)
    assert not out.exists() and progress.exists()
    done = count_units(progress)
    assert done >= stop_after  # the other workers record the unit they were fetching
    resumed = export_trace(url, (0, 2), out, options=OPTIONS)
    assert out.read_bytes() == baseline
    assert resumed.units_resumed == done
    full = export_trace(url, (0, 2), tmp_path / "again.jsonl", options=OPTIONS)
    # the rerun fetched only what was missing: no page twice
    assert resumed.pages_fetched + done - 1 == full.pages_fetched
    assert not progress.exists() and not out.with_name(out.name + ".parts").exists()


def test_resume_through_faults(served: tuple[Chain, str, bytes], tmp_path: Path) -> None:
    chain, _, baseline = served
    injector = FaultInjector(parse_fault_spec("429=0.15,503=0.15"), seed=4)
    with BackgroundServer(create_app(chain, faults=injector)) as server:
        out = tmp_path / "trace.jsonl"
        calls = [0]

        def crash(kind: str, detail: str) -> None:
            calls[0] += 1
            if calls[0] == 6:
                raise Stop("crash")

        with pytest.raises(Stop):
            export_trace(server.url, (0, 2), out, options=OPTIONS, on_unit=crash)
        result = export_trace(server.url, (0, 2), out, options=OPTIONS)
        assert out.read_bytes() == baseline and result.fetch_errors > 0


def test_progress_of_another_export_is_refused(
    served: tuple[Chain, str, bytes], tmp_path: Path
) -> None:
    _, url, baseline = served
    out = tmp_path / "trace.jsonl"

    def crash(kind: str, detail: str) -> None:
        raise Stop("crash")

    with pytest.raises(Stop):
        export_trace(url, (1, 2), out, options=OPTIONS, on_unit=crash)
    with pytest.raises(ExportError, match="--restart"):
        export_trace(url, (0, 2), out, options=OPTIONS)
    restart = ExportOptions(
        page_limit=20, backoff_base=0.001, backoff_cap=0.004, timeout=10.0, restart=True
    )
    export_trace(url, (0, 2), out, options=restart)
    assert out.read_bytes() == baseline
    # a damaged progress file is reported, not trusted
    progress = out.with_name(out.name + ".progress.json")
    progress.write_text("{broken")
    with pytest.raises(ExportError, match="progress file"):
        export_trace(url, (0, 2), out, options=OPTIONS)


def test_killed_process_resumes(served: tuple[Chain, str, bytes], tmp_path: Path) -> None:
    chain, _, baseline = served
    # every answer 40 ms late so that the export is still running when it is killed
    slow = FaultInjector(parse_fault_spec("slow=1:40"))
    with BackgroundServer(create_app(chain, faults=slow)) as server:
        out = tmp_path / "trace.jsonl"
        progress = out.with_name(out.name + ".progress.json")
        argv = ["--node", server.url, "--epochs", "0-2", "--out", str(out)]
        argv += ["--page-limit", "5", "--concurrency", "2"]
        run_export_until_killed(argv, lambda: count_units(progress) >= 8)
        assert not out.exists() and count_units(progress) >= 8
        before = count_units(progress)
        result = export_trace(server.url, (0, 2), out, options=OPTIONS)
        assert out.read_bytes() == baseline
        assert result.units_resumed == before


def test_cli_export_success_and_failure(
    served: tuple[Chain, str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from keepersim.cli import main

    _, url, baseline = served
    out = tmp_path / "cli.jsonl"
    status = main(["export", "--node", url, "--epochs", "0-2", "--out", str(out), "--no-progress"])
    assert status == 0 and out.read_bytes() == baseline
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["fetch_backoff_pauses"] == 0
    assert result["records_written"] == baseline.count(b"\n")
    assert result["records"]["inferences"] == baseline.count(b'"type":"inference"')
    status = main(
        ["export", "--node", url + "/nope", "--epochs", "0-2", "--out", str(tmp_path / "x")]
    )
    captured = capsys.readouterr()
    assert (
        status == 1 and "HTTP 404" in captured.err and f"{url}/nope/productscience" in captured.err
    )
    assert json.loads(captured.out)["ok"] is False
    assert main(["export", "--node", url, "--epochs", "2-1", "--out", "x"]) == 2

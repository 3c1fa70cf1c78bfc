"""The keepersim.testing plugin: fixtures, and assertion helpers that fail when they should."""

from __future__ import annotations

import pytest

from keepersim.proposal.compare import ProposalComparison, compute_metric_comparisons
from keepersim.testing import (
    GovernanceRun,
    RunObservation,
    assert_chain_progresses,
    assert_no_regression,
)
from keepersim.types.params import get_default_params

Failed = pytest.fail.Exception


def _result(diffs, metric="miss_rate"):
    pairs = [("s", {metric: 0.02}, {metric: 0.02 + d}) for d in diffs]
    comparison = ProposalComparison(
        "t", [], None, "gonka", len(diffs), compute_metric_comparisons(pairs)
    )
    return GovernanceRun(comparison, [])


def test_no_regression_passes_when_the_rise_is_ruled_out():
    assert_no_regression(_result([0.0005, 0.001, 0.0008]), metric="miss_rate", max_increase=0.002)
    assert_no_regression(_result([-0.01, -0.012, -0.011]))  # better: fine at max_increase 0


@pytest.mark.parametrize(
    ("diffs", "message"),
    [
        ([0.003, 0.004, 0.0035], "a rise above +0.002 is not ruled out"),
        ([0.0, 0.004, -0.002], "a rise above +0.002 is not ruled out"),  # mean fine, CI not
        ([0.0], "no 95% CI (1 paired seed(s))"),
    ],
)
def test_no_regression_fails(diffs, message):
    with pytest.raises(
        Failed, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")
    ):
        assert_no_regression(_result(diffs), metric="miss_rate", max_increase=0.002)


def test_no_regression_unknown_metric_or_confidence():
    with pytest.raises(Failed, match="no metric 'nope'"):
        assert_no_regression(_result([0.0, 0.0]), metric="nope")
    with pytest.raises(ValueError, match="only 0.95"):
        assert_no_regression(_result([0.0, 0.0]), confidence=0.9)


def _observation(heights, governance=(), changes=((1, b"a"),)):
    obs = RunObservation("s", "proposed", 1, 5, list(governance))
    obs.heights = list(heights)
    obs.params_changes = list(changes)
    return GovernanceRun(_result([0.0]).comparison, [obs])


def test_chain_progresses_passes_and_fails():
    assert_chain_progresses(_observation([1, 2, 3, 4, 5], [(2, b"b")], [(1, b"a"), (3, b"b")]))
    with pytest.raises(Failed, match="stalled: committed 3 of 5 blocks .last 3; first missing 4"):
        assert_chain_progresses(_observation([1, 2, 3]))
    with pytest.raises(Failed, match="update sent at height 2 is not in force at 3"):
        assert_chain_progresses(_observation([1, 2, 3, 4, 5], [(2, b"b")]))
    with pytest.raises(Failed, match="no scenario run was observed"):
        assert_chain_progresses(GovernanceRun(_result([0.0]).comparison, []))


def test_run_under_observes_real_runs(run_under, example_proposal):
    result = run_under(example_proposal, "steady_degraded", seeds=2, blocks=40)
    assert [o.arm for o in result.observations] == ["current", "proposed"] * 2
    assert all(o.heights == list(range(1, 41)) for o in result.observations)
    assert_chain_progresses(result)
    assert result.get("miss_rate").seeds == 2


def test_keepersim_chain_and_load_proposal(keepersim_chain, load_proposal, example_proposal):
    params = load_proposal(example_proposal)
    chain = keepersim_chain(params=params)
    assert chain.get_params().extension_params.cb_miss_threshold_pct == 10
    chain.deliver_block([])
    assert chain.height == 1
    default = keepersim_chain()
    assert (
        default.get_params().extension_params.cb_miss_threshold_pct
        == get_default_params().extension_params.cb_miss_threshold_pct
    )


def test_the_plugin_loads_through_p(pytester, example_proposal):
    """`pytest -p keepersim.testing` gives the fixtures (the entry point names the same module,
    so both ways load it once)."""
    pytester.makepyfile(
        f"""
        from keepersim.testing import assert_chain_progresses

        def test_it(run_under, load_proposal):
            assert load_proposal({str(example_proposal)!r}).extension_params.cb_miss_threshold_pct == 10
            assert_chain_progresses(run_under({str(example_proposal)!r}, "steady_degraded", seeds=1, blocks=20))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "keepersim.testing", "-p", "keepersim.testing", "-q"
    )
    result.assert_outcomes(passed=1)

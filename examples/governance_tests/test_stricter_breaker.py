"""Example governance tests for a chain team, with the keepersim.testing pytest plugin.

The proposal (stricter-breaker.json) is the file `tx gov submit-proposal` takes. Each test is a
few lines and runs in seconds: short scenarios (300 blocks), few paired seeds.
"""

from pathlib import Path

from keepersim.testing import assert_chain_progresses, assert_no_regression

PROPOSAL = Path(__file__).with_name("stricter-breaker.json")


def test_the_proposal_is_valid_and_sets_the_threshold(load_proposal):
    params = load_proposal(PROPOSAL)  # fails like the chain would on a bad proposal
    assert params.extension_params.cb_miss_threshold_pct == 10


def test_miss_rate_does_not_rise_and_the_chain_never_stalls(run_under):
    result = run_under(PROPOSAL, "mainnet_like", seeds=4, blocks=300)
    # "does not rise by more than 0.2 points at 95% confidence"
    assert_no_regression(result, metric="miss_rate", max_increase=0.002, confidence=0.95)
    assert_chain_progresses(result)


def test_the_update_sent_mid_run_is_applied(run_under):
    result = run_under(PROPOSAL, "steady_degraded", seeds=2, blocks=200, at_height=100)
    assert_chain_progresses(result)  # every block committed, the update in force at 101

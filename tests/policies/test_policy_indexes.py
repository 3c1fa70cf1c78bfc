"""Each policy's speed-ups (its ``*_index.py`` module) equal their plain forms.

Random outcome sequences (test_properties' steps) run through the rule three ways: with the
index, with the index forgotten before every other block (as after a reopen), and with every
speed-up in its plain form (the module's ``ENABLED`` off). All three must give the same app
hash (entries, wake-ups, logs), the same transitions and the same gas in every block, and in
each the chain's selection table must equal one from fresh verdicts at every height (so the
verdicts are the same too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from test_properties import Step, open_chain, run, steps_strategy, weights_strategy

from keepersim.chain import Chain
from keepersim.keeper.policies import trin_multiplicative_index, windowed_index

INDEXES: dict[str, ModuleType] = {
    "windowed": windowed_index,
    "windowed-panic": windowed_index,
    "trin-multiplicative": trin_multiplicative_index,
}


@contextmanager
def plain(module: ModuleType) -> Iterator[None]:
    """The policy's speed-ups in their plain forms while the block runs."""
    module.ENABLED = False
    try:
        yield
    finally:
        module.ENABLED = True


def run_with_gas(
    chain: Chain, steps: list[Step], *, cold: bool = False
) -> list[tuple[bytes, tuple[object, ...], int]]:
    """run()'s (app hash, transitions) per block, with each block's gas."""
    gas: list[int] = []
    deliver = chain.deliver_block

    def metered(*args: object, **kwargs: object) -> object:
        result = deliver(*args, **kwargs)  # type: ignore[arg-type]
        gas.append(result.gas_used)
        return result

    chain.deliver_block = metered  # type: ignore[method-assign]
    blocks = run(chain, steps, check=True, cold=cold)
    return [(h, t, g) for (h, t), g in zip(blocks, gas, strict=True)]


@pytest.mark.parametrize("name", sorted(INDEXES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy, weights=weights_strategy)
def test_index_decides_as_the_plain_form(name: str, steps: list[Step], weights: list[int]) -> None:
    with open_chain(name, weights, None) as chain:
        indexed = run_with_gas(chain, steps)
    with open_chain(name, weights, None) as chain:
        forgotten = run_with_gas(chain, steps, cold=True)
    with plain(INDEXES[name]), open_chain(name, weights, None) as chain:
        plain_runs = run_with_gas(chain, steps)
    assert indexed == forgotten == plain_runs


def test_the_comparison_is_not_vacuous(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy sequence windowed moves (transitions, gas) and each form takes its own path:
    latencies deferred to the end block with the index, added at once without."""
    steps = [Step(starts=(0, 0, 1), finishes=(), declines=(), wait=2) for _ in range(12)]
    steps += [Step(starts=(2,), finishes=(0, 1), declines=(0,), wait=1) for _ in range(12)]
    deferred: list[bool] = []
    defer = windowed_index.WindowedIndex.process_defer_latency

    def spy(self: windowed_index.WindowedIndex, latency: int) -> bool:
        deferred.append(defer(self, latency))
        return deferred[-1]

    monkeypatch.setattr(windowed_index.WindowedIndex, "process_defer_latency", spy)
    runs = []
    for form in (nullcontext(), plain(windowed_index)):
        with form, open_chain("windowed", [1 << 17] * 5, None) as chain:
            runs.append(run_with_gas(chain, steps))
    assert runs[0] == runs[1]
    assert any(transitions for _, transitions, _ in runs[0])
    assert all(gas > 0 for _, _, gas in runs[0])
    assert True in deferred and False in deferred

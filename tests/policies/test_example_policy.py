"""docs/example_policy.py, the example of docs/policies.md "Writing a policy", on a real chain."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from file_modules import load_file_module
from policy_helpers import Net, make_params, make_policy_genesis, to_names

from keepersim.chain import Chain
from keepersim.keeper.policies import HealthPolicy

DOCS = Path(__file__).resolve().parents[2] / "docs"
WEIGHTS = {"a": 100, "b": 100, "c": 100}
STRIKES, OUT_BLOCKS = 3, 10


EXAMPLE = load_file_module(DOCS / "example_policy.py", "example_policy")  # as an author has it


def make_strikes() -> HealthPolicy:
    policy: HealthPolicy = EXAMPLE.StrikesPolicy(strikes=STRIKES, out_blocks=OUT_BLOCKS)
    return policy


def open_net(tmp_path: Path | None = None) -> Net:
    # The params name a chain policy ("none", which keeps no state); the chain runs the override.
    genesis = make_policy_genesis(make_params("none", expiration_blocks=3), WEIGHTS)
    if tmp_path is None:
        chain = Chain.open(memory=True, genesis=genesis, policy_override=make_strikes)
    else:
        chain = Chain.open(tmp_path, genesis=genesis, policy_override=make_strikes)
    return Net(chain)


def test_k_misses_in_a_row_keep_out_for_n_blocks_then_readmit() -> None:
    net = open_net()
    with net.chain:
        assert net.chain.get_policy_name() == "strikes"
        net.miss("a", STRIKES - 1)
        net.succeed("a")  # the streak starts over
        net.miss("a", STRIKES - 1)
        assert net.transitions() == [] and net.admitted() == {"a", "b", "c"}
        net.miss("a")
        opened = net.height
        [out] = net.transitions("a")
        assert (out.policy, out.height, out.reason) == ("strikes", opened, "3 misses in a row")
        assert to_names([out]) == [("in", "out")]
        table = net.chain.get_selection_table("m")
        assert table.excluded == ("a",) and net.admitted() == {"b", "c"}
        assert net.state("a") == {"policy": "strikes", "address": "a", "state": "out"} | {
            "admitted": False
        }
        while net.height < opened + OUT_BLOCKS - 1:
            net.block()
            assert "a" not in net.admitted(), net.height
        net.block()  # the end block of opened + OUT_BLOCKS: the wake-up fires
        assert net.height == opened + OUT_BLOCKS
        assert net.admitted() == {"a", "b", "c"}
        assert to_names(net.transitions("a")) == [("in", "out"), ("out", "in")]
        assert net.transitions("a")[-1].height == opened + OUT_BLOCKS
        assert net.transitions("b") == [] and net.transitions("c") == []
        # Re-admitted with a fresh streak: K more misses in a row to go out again.
        net.miss("a", STRIKES - 1)
        assert "a" in net.admitted()
        net.miss("a")
        assert "a" not in net.admitted()
        assert to_names(net.transitions("a"))[-1] == ("in", "out")
        assert net.chain.verify_app_hash()


def test_the_wakeup_is_stored_state_and_survives_a_restart(tmp_path: Path) -> None:
    net = open_net(tmp_path)
    with net.chain:
        net.miss("a", STRIKES)
        opened = net.height
        net.run(2)
        assert "a" not in net.admitted()
    net = open_net(tmp_path)  # the same folder: the stored chain, a new policy object
    with net.chain:
        assert "a" not in net.admitted()
        net.run_until(opened + OUT_BLOCKS)
        assert "a" in net.admitted()
        assert to_names(net.transitions("a")) == [("out", "in")]


def test_the_example_is_written_from_the_policy_interface_alone() -> None:
    """Its imports: the policy interface (keepersim.keeper.policies) and the message types, never
    the keeper, the chain or the acceleration layer beneath the rules."""
    tree = ast.parse((DOCS / "example_policy.py").read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    allowed = ("__future__", "typing", "keepersim.keeper.policies", "keepersim.types.")
    assert [m for m in imported if not m.startswith(allowed)] == []
    assert "keepersim.keeper.policies" in imported


def test_policies_md_shows_the_example_as_it_is() -> None:
    """The "Writing a policy" section's code block is a verbatim slice of the example file."""
    doc = (DOCS / "policies.md").read_text()
    section = doc.split("## Writing a policy", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "no python block in 'Writing a policy'"
    source = (DOCS / "example_policy.py").read_text()
    for block in blocks:
        if "class StrikesPolicy" in block:
            assert block in source
            break
    else:
        pytest.fail("'Writing a policy' does not show StrikesPolicy")


class ForgetfulStrikes(EXAMPLE.StrikesPolicy):  # type: ignore[misc, name-defined]
    """The example with a bug: a success resets the streak in memory and never sets it."""

    def process_outcome(
        self, ctx: object, address: str, outcome: object, inference: object
    ) -> None:
        entry = ctx.find(address, self.decode)  # type: ignore[attr-defined]
        if entry is not None and outcome is EXAMPLE.Outcome.SUCCESS:
            entry.consecutive_failures = 0  # lost: no ctx.set
            return
        super().process_outcome(ctx, address, outcome, inference)


def test_a_change_without_set_is_caught_by_the_tests() -> None:
    """PolicyStore.verify_unchanged (on under tests/conftest.py): an entry changed and never
    set would silently be lost; the block fails instead, naming the policy and the entry."""
    genesis = make_policy_genesis(make_params("none", expiration_blocks=3), WEIGHTS)
    with Chain.open(memory=True, genesis=genesis, policy_override=ForgetfulStrikes) as chain:
        net = Net(chain)
        net.miss("a")
        with pytest.raises(AssertionError, match="strikes: the entry of 'a' changed without set"):
            net.succeed("a")

"""Fixtures: one keepersim-made chain history per session, and stand-in nodes over it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from standin.chain_node import OLDER_VERSION, ChainHistory, StandinNode, build_chain_history


@pytest.fixture(scope="session")
def chain_history() -> ChainHistory:
    return build_chain_history()


@pytest.fixture
def current_node(chain_history: ChainHistory) -> Iterator[StandinNode]:
    node = StandinNode(chain_history).start()
    yield node
    node.stop()


@pytest.fixture
def older_node(chain_history: ChainHistory) -> Iterator[StandinNode]:
    node = StandinNode(chain_history, version=OLDER_VERSION).start()
    yield node
    node.stop()

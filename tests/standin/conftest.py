"""Fixtures: one keepersim-made chain history per session, the shared mainnet epochs as another,
and stand-in nodes over them."""

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


@pytest.fixture(scope="session")
def mainnet_history() -> ChainHistory:
    from standin.mainnet import MAINNET_DATA, build_mainnet_history

    if not MAINNET_DATA.is_dir():
        pytest.skip("no shared mainnet data (tests/mainnet_data.py says where it is looked for)")
    return build_mainnet_history()


@pytest.fixture
def mainnet_node(mainnet_history: ChainHistory) -> Iterator[StandinNode]:
    node = StandinNode(mainnet_history).start()
    yield node
    node.stop()

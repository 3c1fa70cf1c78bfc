"""Fixtures of the core tests: block drivers over real LevelDB chains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from chain_protos import TypeProto, compute_chain_descriptor_set, compute_package_types
from core_helpers import Driver

from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams


@pytest.fixture
def breaker_params(make_test_params: Callable[..., ModuleParams]) -> ModuleParams:
    """Code defaults (breaker 25% / 4 / 50 / 500) with long epochs, expiry after 5 blocks and the
    SPRT off, so that only the circuit breaker acts."""
    params = make_test_params()
    params.params.epoch_params.epoch_length = 1000
    params.params.validation_params.expiration_blocks = 5
    params.extension_params.sprt_enabled = False
    return params


@pytest.fixture
def make_driver(make_chain: Any, make_genesis: Any) -> Callable[..., Driver]:
    """Factory: ``make_driver(params, n=4, **genesis_kwargs)`` -> Driver over a fresh chain."""

    def make(params: ModuleParams, n: int = 4, **kw: Any) -> Driver:
        return Driver(make_chain(make_genesis(n, params=params, **kw)))

    return make


@pytest.fixture
def driver(make_driver: Callable[..., Driver], breaker_params: ModuleParams) -> Driver:
    return make_driver(breaker_params)


@pytest.fixture(scope="session")
def chain_types(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TypeProto]:
    """The vendored chain types, compiled once per session."""
    files = compute_chain_descriptor_set(tmp_path_factory.mktemp("chain_protos"))
    return compute_package_types(list(files.file))

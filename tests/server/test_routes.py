"""The route table: it answers every shared REST route (or says why not), once, with handlers
that take exactly the template's path parameters; and :meth:`Chain.get_page`, the read the
paginated routes stand on, pages a collection as Cosmos ``query.Paginate`` does."""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chain_builders import make_genesis, make_participant
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.chain import Chain
from keepersim.server.app import BackgroundServer, create_app
from keepersim.server.routes import METRICS, ROUTE_TABLE, UNSERVED
from keepersim.types import keys, rest_routes
from keepersim.types.messages import Participant

ADDRESSES = sorted(["a", "b0", "b1", "c", "ca", "d+/", "z"])


def get_shared_routes() -> dict[str, str]:
    """Every route template of :mod:`keepersim.types.rest_routes`, by constant name."""
    return {
        name: value
        for name in rest_routes.__all__
        if isinstance(value := getattr(rest_routes, name), str)
        and value.startswith("/")
        and not name.endswith("_PREFIX")
    }


def get_template_params(path: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(path) if name]


def test_route_table_has_no_duplicate_paths() -> None:
    paths = [(spec.method, spec.path) for spec in ROUTE_TABLE]
    assert len(paths) == len(set(paths))
    assert len({spec.path for spec in ROUTE_TABLE}) == len(ROUTE_TABLE)


def test_route_table_covers_every_shared_route() -> None:
    shared = get_shared_routes()
    assert "GET_RANDOM_EXECUTOR" in shared and "KEEPERSIM_BLOCKS" in shared  # the scan works
    served = {spec.path for spec in ROUTE_TABLE}
    missing = {n: p for n, p in shared.items() if p not in served and p not in UNSERVED}
    assert missing == {}, "rest_routes templates neither in ROUTE_TABLE nor in UNSERVED"
    assert served & set(UNSERVED) == set()
    assert set(UNSERVED) <= set(shared.values())
    assert served - set(shared.values()) == {METRICS}  # the one route that is not shared


@pytest.mark.parametrize("spec", ROUTE_TABLE, ids=lambda spec: spec.path)
def test_handlers_take_the_templates_parameters(spec: object) -> None:
    """Path parameters reach a handler by name: a renamed argument would fail every request."""
    from keepersim.server.routes import RouteSpec

    assert isinstance(spec, RouteSpec)
    expected = ["state", *get_template_params(spec.path)]
    expected += ["params"] if spec.query else []
    expected += ["body"] if spec.body else []
    assert list(inspect.signature(spec.handler).parameters) == expected


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    genesis = make_genesis(participants=[make_participant(a) for a in ADDRESSES])
    chain = Chain.open(Path(tmp_path_factory.mktemp("routes")) / "db", genesis=genesis)
    yield chain
    chain.close()


def test_every_table_route_is_served_and_unserved_ones_are_not(chain: Chain) -> None:
    """Each table path, its parameters filled, reaches its handler (whatever the handler then
    answers, it is not the unknown-route 404); an unserved route gets that 404."""
    no_route = re.compile(r"^no route for |^method .* not allowed")
    with (
        BackgroundServer(create_app(chain)) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        for spec in ROUTE_TABLE:
            path = rest_routes.compute_route_path(
                spec.path, **dict.fromkeys(get_template_params(spec.path), "0")
            )
            r = client.request(spec.method, path, content=b"[]" if spec.body else None)
            if r.status_code >= 400:
                assert not no_route.search(r.json()["message"]), (spec.path, r.text)
        for path in UNSERVED:
            r = client.get(path)
            assert r.status_code == 404
            assert r.json() == {"code": 5, "message": f"no route for GET {path}", "details": []}


def _addresses(values: tuple[bytes, ...]) -> list[str]:
    return [Participant.FromString(v).address for v in values]


@settings(max_examples=60, deadline=None)
@given(limit=st.integers(1, len(ADDRESSES) + 2), count_total=st.booleans())
def test_pages_joined_by_next_key_are_the_collection(
    chain: Chain, limit: int, count_total: bool
) -> None:
    seen: list[str] = []
    key = b""
    while True:
        page = chain.get_page(keys.PARTICIPANTS, key=key, limit=limit, count_total=count_total)
        assert page.height == chain.height
        assert 1 <= len(page.values) <= limit
        assert page.total == (len(ADDRESSES) if count_total else 0)
        seen += _addresses(page.values)
        if page.next_key is None:
            break
        assert len(page.values) == limit
        key = page.next_key
    assert seen == ADDRESSES


@settings(max_examples=60, deadline=None)
@given(
    offset=st.integers(0, len(ADDRESSES) + 1),
    limit=st.none() | st.integers(1, len(ADDRESSES) + 1),
    start=st.sampled_from(["", *ADDRESSES, "b", "zz"]),
)
def test_page_is_a_slice_from_key_and_offset(
    chain: Chain, offset: int, limit: int | None, start: str
) -> None:
    page = chain.get_page(keys.PARTICIPANTS, key=start.encode(), offset=offset, limit=limit)
    rest = [a for a in ADDRESSES if a >= start][offset:]
    expected = rest if limit is None else rest[:limit]
    assert _addresses(page.values) == expected
    after = rest[len(expected) :]
    assert page.next_key == (after[0].encode() if after else None)


def test_page_of_an_empty_collection(chain: Chain) -> None:
    page = chain.get_page(keys.EPOCH_DECLINES, limit=5, count_total=True)
    assert (page.values, page.next_key, page.total) == ((), None, 0)

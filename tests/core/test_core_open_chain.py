"""``open_chain``: the one way a run opens its chain, in memory or in a fresh LevelDB folder.

Every folder state (missing, empty, holding a file, holding a chain) with and without
``resume``, with a good and a bad genesis: a fresh folder gets the genesis, a busy one is refused
naming it unless ``resume`` (then it opens as it stands), and a failed opening leaves the folder
as it found it. Memory and LevelDB give the same app hash.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from keepersim.chain import Chain, StoreNotEmptyError, open_chain
from keepersim.types.errors import GenesisError
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

GenesisFactory = Callable[..., Genesis]
STATES = ("missing", "empty", "file", "chain")


def prepare(folder: Path, state: str, make_genesis: GenesisFactory) -> None:
    if state == "empty":
        folder.mkdir()
    elif state == "file":
        folder.mkdir()
        (folder / "notes.txt").write_text("x")
    elif state == "chain":
        with Chain.open(folder, genesis=make_genesis(2, chain_id="older")):
            pass


def get_listing(folder: Path) -> list[str] | None:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else None


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("good", [True, False])
def test_every_folder_state(
    tmp_path: Path, make_genesis: GenesisFactory, state: str, resume: bool, good: bool
) -> None:
    genesis = make_genesis(3)
    if not good:
        genesis.chain_id = ""  # GenesisError in init_genesis
    folder = tmp_path / "store"
    prepare(folder, state, make_genesis)
    before = get_listing(folder)
    fresh = state in ("missing", "empty")
    if not fresh and not resume:
        with pytest.raises(StoreNotEmptyError) as info:
            open_chain("leveldb", folder, genesis=genesis, resume=resume)
        assert info.value.folder == folder and str(folder) in str(info.value)
        assert get_listing(folder) == before
        return
    if state == "chain":  # resumed: the stored chain as it stands, whatever the genesis
        with open_chain("leveldb", folder, genesis=genesis, resume=True) as chain:
            assert chain.chain_id == "older"
        return
    if not good and fresh:
        with pytest.raises(GenesisError):
            open_chain("leveldb", folder, genesis=genesis, resume=resume)
        assert get_listing(folder) == before  # left as found: missing, or empty
        return
    if not good:  # a folder of other files, resumed: LevelDB opens beside them, genesis fails
        with pytest.raises(GenesisError):
            open_chain("leveldb", folder, genesis=genesis, resume=True)
        assert "notes.txt" in (get_listing(folder) or [])  # a store to go on with is kept
        return
    with open_chain("leveldb", folder, genesis=genesis, resume=resume) as chain:
        assert chain.chain_id == genesis.chain_id and chain.height == genesis.keepersim.height
        leveldb_hash = chain.app_hash
    with open_chain("memory", None, genesis=genesis) as memory:
        assert memory.app_hash == leveldb_hash
    with Chain.open(folder) as reopened:  # the genesis was committed to the folder
        assert reopened.app_hash == leveldb_hash


def test_memory_ignores_the_path_and_leveldb_needs_one(
    tmp_path: Path, make_genesis: GenesisFactory
) -> None:
    with open_chain("memory", tmp_path / "unused", genesis=make_genesis(2)) as chain:
        assert chain.has_genesis()
    assert not (tmp_path / "unused").exists()
    with pytest.raises(ValueError, match="leveldb' with a path"):
        open_chain("leveldb", None, genesis=make_genesis(2))
    with pytest.raises(ValueError, match="'disk'"):
        open_chain("disk", tmp_path, genesis=make_genesis(2))  # type: ignore[arg-type]

"""Errors of the store layer, kept apart from keeper errors: they mean the storage itself failed."""

from __future__ import annotations

import os


class StoreError(Exception):
    """Base of every store failure (I/O, corrupt metadata, misuse of a closed store)."""


class StoreLockedError(StoreError):
    """Another process, or another handle in this one, holds the LevelDB folder's lock."""

    def __init__(self, path: str | os.PathLike[str], detail: str = "") -> None:
        self.path = os.fspath(path)
        msg = f"store at {self.path!r} is locked by another open handle"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class StoreClosedError(StoreError):
    """The backend (or the snapshot's backend) was closed; reads and writes are no longer valid."""

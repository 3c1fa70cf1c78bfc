"""Checkpoints of a resumable run, committed in the same LevelDB batch as the block they follow.

A run (``simulate`` / ``replay`` with ``--store-dir``) passes :func:`encode_checkpoint`'s entries
to ``Chain.deliver_block(..., meta=...)``: the run's in-memory state as it stands just before the
block's commit, together with the block's result, under keys outside the app hash
(:data:`~keepersim.store.committed.RUN_META_PREFIX`). A kill at any instant therefore leaves a
store whose last block and checkpoint belong together; ``--resume`` reads both back
(:func:`read_checkpoint`), finishes that block's bookkeeping with the stored result and goes on.

The state is pickled; protobuf messages (which do not pickle) travel as their serialized bytes.
Loading accepts only keepersim's classes, protobuf messages of ``keepersim.types.pb``, this
module's two rebuilders and a few builtin containers: no other function can be named, so a store
cannot make the loader call code of its choosing (it could still call a keepersim class: resume
only stores you made). Each checkpoint
carries a fingerprint of the run's inputs: a store from other inputs is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import operator
import os
import pickle
import pkgutil
import signal
from collections.abc import Callable
from functools import cache
from typing import Any

from google.protobuf.message import Message

from keepersim.store.committed import RUN_META_PREFIX
from keepersim.types.errors import KeepersimError

__all__ = [
    "CHECKPOINT_KEY",
    "FINGERPRINT_KEY",
    "DictJournal",
    "ResumeError",
    "compute_fingerprint",
    "decode_state",
    "encode_checkpoint",
    "encode_state",
    "load_message",
    "read_checkpoint",
    "rebuild_slots",
]

CHECKPOINT_KEY = RUN_META_PREFIX + b"checkpoint"
FINGERPRINT_KEY = RUN_META_PREFIX + b"fingerprint"

_SAFE_GLOBALS = {
    "builtins": frozenset({"set", "frozenset", "bytearray", "complex", "slice", "range"}),
    "collections": frozenset({"Counter", "deque", "OrderedDict", "defaultdict"}),
    "copyreg": frozenset({"_reconstructor"}),
}


KILL_AT_ENV = "KEEPERSIM_TEST_KILL_AT"
"""Tests only: ``"<height>:<phase>"`` makes a resumable run SIGKILL itself at that point."""
_KILL_AT = os.environ.get(KILL_AT_ENV)


def process_kill_point(height: int, phase: str) -> None:
    """A named point of a resumable run (``pre``: the checkpoint is built, the block not yet
    committed; ``post``: committed, its events not yet processed). Kill tests set
    :data:`KILL_AT_ENV` to die there with a real SIGKILL, at a reproducible instant."""
    if _KILL_AT is not None and f"{height}:{phase}" == _KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


class ResumeError(KeepersimError):
    """A store cannot be resumed: made by other inputs, or its checkpoint is missing."""


@cache
def _get_message_classes() -> dict[str, type[Message]]:
    import keepersim.types.pb.inference.inference as chain_package
    import keepersim.types.pb.keepersim.v1 as own_package

    out: dict[str, type[Message]] = {}
    for package in (chain_package, own_package):
        # every generated module of the chain's protos and keepersim.v1's
        names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
        for name in names:
            if not name.endswith("_pb2"):
                continue
            module = importlib.import_module(f"{package.__name__}.{name}")
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, Message):
                    out[value.DESCRIPTOR.full_name] = value
    # Checkpoints written before keepersim's own messages left the chain's package name them so.
    for name, value in list(out.items()):
        if name.startswith("keepersim.v1."):
            out.setdefault("inference.inference." + name.removeprefix("keepersim.v1."), value)
    return out


def load_message(name: str, data: bytes) -> Message:
    """A protobuf message of ``keepersim.types.pb`` from its type name and bytes."""
    cls = _get_message_classes().get(name)
    if cls is None:
        raise pickle.UnpicklingError(f"unknown message type {name!r}")
    return cls.FromString(data)


def _reduce_message(msg: Message) -> tuple[Callable[[str, bytes], Message], tuple[str, bytes]]:
    return load_message, (msg.DESCRIPTOR.full_name, msg.SerializeToString())


@cache
def _get_slot_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def rebuild_slots(cls: type, values: tuple[Any, ...]) -> Any:
    """A slots dataclass from its field values (the inverse of its reducer here)."""
    obj: Any = object.__new__(cls)
    for name, value in zip(_get_slot_names(cls), values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


def _make_slots_reducer(cls: type) -> Callable[[Any], Any]:
    names = _get_slot_names(cls)
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (rebuild_slots, (cls, (get(obj),)))
    return lambda obj: (rebuild_slots, (cls, get(obj)))


def _reduce_default(obj: Any) -> Any:
    return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)


class _DispatchTable(dict[type, Any]):
    """Reducers by type, looked up by the C pickler for objects it has no fast path for:
    protobuf messages as bytes; keepersim's slots dataclasses through one attrgetter (the
    dataclass default recomputes its fields per object, the bulk of a checkpoint's cost)."""

    def __missing__(self, cls: type) -> Any:
        module = getattr(cls, "__module__", "") or ""
        is_slots_dataclass = dataclasses.is_dataclass(cls) and "__slots__" in vars(cls)
        if is_slots_dataclass and module.startswith("keepersim."):
            reducer = _make_slots_reducer(cls)
        else:
            reducer = _reduce_default
        self[cls] = reducer
        return reducer


@cache
def _get_dispatch_table() -> _DispatchTable:
    table = _DispatchTable()
    table.update(dict.fromkeys(_get_message_classes().values(), _reduce_message))
    return table


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "keepersim" or module.startswith("keepersim."):
            obj = super().find_class(module, name)
            # Classes (a checkpoint's objects are rebuilt with __new__ and their state) and the
            # two rebuilders here; no other keepersim function can be named and so called.
            if isinstance(obj, type) or obj in (load_message, rebuild_slots):
                return obj
        elif name in _SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the checkpoint names {module}.{name}, which is not allowed")


def encode_state(state: object) -> bytes:
    """``state`` as bytes (pickle; protobuf messages as their serialized bytes)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _get_dispatch_table()
    pickler.dump(state)
    return out.getvalue()


def decode_state(data: bytes) -> Any:
    """The inverse of :func:`encode_state` (only allowed classes load)."""
    return _Unpickler(io.BytesIO(data)).load()


class DictJournal:
    """Dicts of a run's state written incrementally, one meta entry per dict entry: per block
    only the entries added, replaced or grown since the last checkpoint, and deletions for the
    removed ones (a full pickle of them every block would cost more than the block).

    A value counts as changed when it is another object or, for a list, has another length: the
    values must be replaced, or be lists that are only appended to. The journal holds the
    objects it last wrote, so an identity can never be recycled for a new object meanwhile.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        # prefix -> key -> (value, len) last written
        self._seen: dict[bytes, dict[Any, tuple[Any, int]]] = {}

    def get_delta(self, prefix: bytes, current: dict[Any, Any]) -> dict[bytes, bytes | None]:
        """Meta entries that bring the stored copy of ``current`` (under ``prefix``) up to
        date; the journal then takes them as written."""
        seen = self._seen.setdefault(prefix, {})
        out: dict[bytes, bytes | None] = {}
        for key in seen.keys() - current.keys():
            out[prefix + encode_state(key)] = None
            del seen[key]
        for key, value in current.items():
            size = len(value) if type(value) is list else -1
            last = seen.get(key)
            if last is None or last[0] is not value or last[1] != size:
                out[prefix + encode_state(key)] = encode_state(value)
                seen[key] = (value, size)
        return out

    def load(self, prefix: bytes, entries: list[tuple[bytes, bytes]]) -> dict[Any, Any]:
        """The dict stored under ``prefix`` (from ``Chain.iterate_meta(prefix)``); the journal
        takes it as written."""
        out = {decode_state(k[len(prefix) :]): decode_state(v) for k, v in entries}
        self._seen[prefix] = {
            key: (value, len(value) if type(value) is list else -1) for key, value in out.items()
        }
        return out


def compute_fingerprint(inputs: object) -> bytes:
    """SHA-256 of the run's inputs (a JSON-able object; keys sorted)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).digest()


def encode_checkpoint(fingerprint: bytes, state: object) -> dict[bytes, bytes | None]:
    """The ``meta`` entries of one block: the fingerprint and the encoded state."""
    out: dict[bytes, bytes | None] = {FINGERPRINT_KEY: fingerprint}
    out[CHECKPOINT_KEY] = encode_state(state)
    return out


def read_checkpoint(
    get_meta: Callable[[bytes], bytes | None], fingerprint: bytes, where: str
) -> Any:
    """The state committed with the store's last block, or None if no block carried one.

    Raises :class:`ResumeError` when the store was made by a run with other inputs.
    """
    stored = get_meta(FINGERPRINT_KEY)
    if stored is None:
        return None
    if stored != fingerprint:
        raise ResumeError(
            f"{where} was made by a run with other inputs (scenario, seed, policy, params, "
            "governance or trace differ): cannot resume it; use an empty --store-dir"
        )
    data = get_meta(CHECKPOINT_KEY)
    if data is None:
        raise ResumeError(f"{where}: the store has a fingerprint but no checkpoint")
    try:
        return decode_state(data)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise ResumeError(f"{where}: the checkpoint cannot be read: {exc}") from exc

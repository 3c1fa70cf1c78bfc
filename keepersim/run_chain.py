"""The one way a run opens its chain: ``keepersim simulate``, trace replays (as recorded,
what-if) and ``keepersim serve``'s runners all call :func:`open_run_chain`.

It is :func:`keepersim.chain.open_chain` with the run's own error: a LevelDB folder that already
holds a chain (:class:`~keepersim.chain.StoreNotEmptyError`) becomes ``error`` (the caller's
exception class, so the command's one-line message stays its own), saying what the run needs
and how to go on. It imports only the chain, so every layer that runs a chain (the simulator,
replay, the served app) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

from keepersim.chain import Chain, StoreKind, StoreNotEmptyError, open_chain
from keepersim.keeper.policies import PolicyFactory
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

__all__ = ["open_run_chain"]


def open_run_chain(
    store: StoreKind,
    path: str | os.PathLike[str] | None,
    *,
    genesis: Genesis,
    error: type[Exception],
    needs: str,
    policy_override: PolicyFactory | None = None,
    resume: bool = False,
    write_every: int = 1,
) -> Chain:
    """A fresh chain with ``genesis``, in memory (``path`` unused) or on LevelDB in ``path``
    (which must be missing or empty unless ``resume``): the one way a run opens its chain
    (simulate, replay as recorded and what-if, serve's runners). A folder that holds a chain
    raises ``error("store folder F is not empty: <needs>")``, the run's own error: ``needs``
    says what the run needs and how to go on (e.g. "a replay needs a fresh store (--resume
    goes on with it)")."""
    folder = None if store == "memory" or path is None else Path(path)
    try:
        return open_chain(
            store,
            folder,
            genesis=genesis,
            policy_override=policy_override,
            resume=resume,
            write_every=write_every,
        )
    except StoreNotEmptyError as exc:
        raise error(f"{exc}: {needs}") from None

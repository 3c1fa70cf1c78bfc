"""The generated protobuf code in keepersim/types/pb matches proto/ (scripts/gen_proto.py --check)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chain_protos import needs_protoc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpc_tools (grpcio-tools, a dev extra) is not importable: protoc is unavailable",
)
def test_generated_protobuf_code_is_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


CHAIN_PACKAGE = "inference.inference"
OWN_PACKAGE = "keepersim.v1"


def get_generated_types() -> dict[str, tuple[str, str]]:
    """Every top-level message and enum of the generated code: full name -> (package, module)."""
    import keepersim.types.pb as pb

    out: dict[str, tuple[str, str]] = {}
    for info in pkgutil.walk_packages(pb.__path__, pb.__name__ + "."):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(info.name)
        file = module.DESCRIPTOR
        kinds = (file.message_types_by_name, file.enum_types_by_name)
        for descriptor in (d for kind in kinds for d in kind.values()):
            out[descriptor.full_name] = (file.package, info.name)
    return out


def test_generated_modules_follow_their_proto_package() -> None:
    types = get_generated_types()
    assert {package for package, _ in types.values()} == {CHAIN_PACKAGE, OWN_PACKAGE}
    for full_name, (package, module) in types.items():
        assert full_name == f"{package}.{full_name.rsplit('.', 1)[1]}"
        assert module.startswith(f"keepersim.types.pb.{package}."), (full_name, module)


@needs_protoc
def test_keepersim_package_holds_none_of_the_chains_names(chain_types: dict[str, Any]) -> None:
    """The chain's names are those of its vendored protos (proto/chain, gonka ee730031)."""
    own = {n.rsplit(".", 1)[1] for n, (p, _) in get_generated_types().items() if p == OWN_PACKAGE}
    assert own, "keepersim.v1 defines no message"
    assert not own & set(chain_types), sorted(own & set(chain_types))


@needs_protoc
def test_chain_named_types_are_in_the_chains_package_and_nothing_else_is(
    chain_types: dict[str, Any],
) -> None:
    """Guard for vendoring the chain's protos: what bears a chain name is in inference.inference
    (to be replaced by the chain's definition), and keepersim adds nothing of its own there."""
    types = get_generated_types()
    for full_name, (package, _) in types.items():
        short = full_name.rsplit(".", 1)[1]
        assert (package == CHAIN_PACKAGE) == (short in chain_types), full_name

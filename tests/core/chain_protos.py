"""The chain's vendored protos (proto/chain, gonka ee730031), compiled for the tests: the
reference that keepersim's descriptors and names are checked against (scripts/vendor_chain_protos.py
refreshes the copy)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
CHAIN_PROTO_ROOT = ROOT / "proto" / "chain"
PACKAGE = "inference.inference"

TypeProto = descriptor_pb2.DescriptorProto | descriptor_pb2.EnumDescriptorProto

needs_protoc = pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpc_tools (grpcio-tools, a dev extra) is not importable: protoc is unavailable",
)


def compute_chain_descriptor_set(out: Path) -> descriptor_pb2.FileDescriptorSet:
    """Compile the vendored reference copy with grpc_tools' protoc (in process)."""
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(CHAIN_PROTO_ROOT)) for p in CHAIN_PROTO_ROOT.rglob("*.proto"))
    target = out / "chain.pb"
    args = ["protoc", f"-I{CHAIN_PROTO_ROOT}", f"-I{include}", f"--descriptor_set_out={target}"]
    assert protoc.main([*args, *protos]) == 0, "protoc could not compile proto/chain"
    return descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes())


def compute_package_types(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, TypeProto]:
    """{name: descriptor} of the top-level messages and enums of package inference.inference."""
    found: dict[str, TypeProto] = {}
    for file in files:
        if file.package != PACKAGE:
            continue
        items: list[TypeProto] = [*file.message_type, *file.enum_type]
        for item in items:
            assert item.name not in found, f"{item.name} is defined twice ({file.name})"
            found[item.name] = item
    return found

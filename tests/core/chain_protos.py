"""The chain's vendored protos (proto/inference/inference, gonka ee730031), compiled afresh for the
tests: the reference that keepersim's generated descriptors and names are checked against
(scripts/vendor_chain_protos.py refreshes the copies, scripts/gen_proto.py compiles them into
keepersim). One protoc call, files of the repository only (no mirror, no network)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
#: The import root of the vendored files (they import each other as inference/inference/x.proto).
CHAIN_PROTO_ROOT = ROOT / "proto"
CHAIN_PROTO_DIR = CHAIN_PROTO_ROOT / "inference" / "inference"
PACKAGE = "inference.inference"

TypeProto = descriptor_pb2.DescriptorProto | descriptor_pb2.EnumDescriptorProto

needs_protoc = pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpc_tools (grpcio-tools, a dev extra) is not importable: protoc is unavailable",
)


def compute_chain_descriptor_set(out: Path) -> descriptor_pb2.FileDescriptorSet:
    """Compile the vendored files with grpc_tools' protoc (in process, one call)."""
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(
        p.relative_to(CHAIN_PROTO_ROOT).as_posix() for p in CHAIN_PROTO_DIR.glob("*.proto")
    )
    assert protos, f"no .proto files in {CHAIN_PROTO_DIR}"
    target = out / "chain.pb"
    args = ["protoc", f"-I{CHAIN_PROTO_ROOT}", f"-I{include}", f"--descriptor_set_out={target}"]
    assert protoc.main([*args, *protos]) == 0, f"protoc could not compile {CHAIN_PROTO_DIR}"
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


def compute_all_types(
    files: list[descriptor_pb2.FileDescriptorProto], package: str = PACKAGE
) -> dict[str, tuple[str, TypeProto]]:
    """{full name: (file name, descriptor)} of every message and enum of ``package``, nested ones
    included (map entries too: they are messages of the descriptor)."""
    found: dict[str, tuple[str, TypeProto]] = {}

    def add(prefix: str, file: str, items: list[TypeProto]) -> None:
        for item in items:
            name = f"{prefix}.{item.name}"
            assert name not in found, f"{name} is defined twice ({file})"
            found[name] = (file, item)
            if isinstance(item, descriptor_pb2.DescriptorProto):
                add(name, file, [*item.nested_type, *item.enum_type])

    for file in files:
        if file.package == package:
            add(file.package, file.name, [*file.message_type, *file.enum_type])
    return found

"""keepersim's generated descriptors of package inference.inference, against the chain's own protos
(proto/inference/inference, vendored from gonka ee730031 by scripts/vendor_chain_protos.py and
compiled here afresh with protoc).

Every message and enum of the package, nested ones included, is compared: each field by name,
number, type, type name, label, oneof membership, proto3 ``optional`` and ``deprecated``; each enum
value by name and number; and each type must live in the file upstream defines it in. keepersim
may add nothing to the package, and its own package keepersim.v1 reuses none of the chain's
names. No difference is tolerated: the migration of issue 12 made the generated code upstream's.

Also here: the vendoring script's stripping rule and its list of non-nullable fields, which
``keepersim.types.chain_json.NON_NULLABLE_FIELDS`` must equal.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from chain_protos import (
    CHAIN_PROTO_DIR,
    CHAIN_PROTO_ROOT,
    PACKAGE,
    TypeProto,
    compute_all_types,
    compute_chain_descriptor_set,
    needs_protoc,
)
from file_modules import load_file_module
from google.protobuf import descriptor_pb2

from keepersim.types.chain_json import NON_NULLABLE_FIELDS

ROOT = Path(__file__).resolve().parents[2]
VENDOR_SCRIPT = ROOT / "scripts" / "vendor_chain_protos.py"
#: A bare mirror of gonka holding the pinned commit (absent on CI: the freshness test skips).
MIRROR = Path(os.environ.get("KEEPERSIM_GONKA_GIT_DIR", "/work/.mirror/kaitakuai+gonka/repo"))
PINNED_COMMIT = "ee730031"
KEEPERSIM_CHAIN_PACKAGE = "keepersim.types.pb.inference.inference"
KEEPERSIM_OWN_PACKAGE = "keepersim.types.pb.keepersim.v1"
#: The 20 types of issue 12 (docs/design/chain-types-v0.2.14.md section 1): they must be among
#: those compared (a guard against comparing an empty set).
SHARED_TYPES = (
    "Participant",
    "CurrentEpochStats",
    "Inference",
    "Params",
    "EpochParams",
    "ValidationParams",
    "Decimal",
    "Epoch",
    "EpochGroupData",
    "ValidationWeight",
    "MLNodeInfo",
    "EpochPerformanceSummary",
    "InferenceTimeout",
    "ExcludedParticipant",
    "MsgUpdateParams",
    "MsgStartInference",
    "MsgFinishInference",
    "GenesisState",
    "ParticipantStatus",
    "InferenceStatus",
)

FDP = descriptor_pb2.FieldDescriptorProto
Types = dict[str, tuple[str, TypeProto]]


def get_vendor_script() -> ModuleType:
    """scripts/vendor_chain_protos.py as a module (its file list and header are the rule)."""
    return load_file_module(VENDOR_SCRIPT, "vendor_chain_protos")


def get_generated_files(package: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """The descriptors keepersim's generated classes of one package are built from."""
    modules = importlib.import_module(package)
    files = []
    for info in pkgutil.iter_modules(modules.__path__):
        if info.name.endswith("_pb2"):
            module = importlib.import_module(f"{package}.{info.name}")
            proto = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(proto)
            files.append(proto)
    return files


def compute_field_row(field: FDP, message: descriptor_pb2.DescriptorProto) -> dict[str, object]:
    """What is compared of a field (its name is the key)."""
    oneof = message.oneof_decl[field.oneof_index].name if field.HasField("oneof_index") else None
    return {
        "number": field.number,
        "type": FDP.Type.Name(field.type).removeprefix("TYPE_").lower(),
        "type_name": field.type_name,
        "label": FDP.Label.Name(field.label).removeprefix("LABEL_").lower(),
        "oneof": oneof,
        "proto3_optional": field.proto3_optional,
        "deprecated": field.options.deprecated,
    }


def compute_type_differences(name: str, upstream: TypeProto, ours: TypeProto) -> list[str]:
    """One line per difference between an upstream type and keepersim's, ``ours != upstream``."""
    kinds = [
        type(t).__name__.removesuffix("DescriptorProto") or "Message" for t in (ours, upstream)
    ]
    if kinds[0] != kinds[1]:
        return [f"{name}: kind {kinds[0]} != {kinds[1]}"]
    out: list[str] = []
    if isinstance(upstream, descriptor_pb2.DescriptorProto):
        assert isinstance(ours, descriptor_pb2.DescriptorProto)
        if ours.options.map_entry != upstream.options.map_entry:
            out.append(
                f"{name}: map_entry {ours.options.map_entry} != {upstream.options.map_entry}"
            )
        mine = {f.name: compute_field_row(f, ours) for f in ours.field}
        for field in upstream.field:
            where = f"{name}.{field.name}"
            other = mine.pop(field.name, None)
            if other is None:
                out.append(f"{where}: missing")
                continue
            for key, value in compute_field_row(field, upstream).items():
                if other[key] != value:
                    out.append(f"{where}: {key} {other[key]!r} != {value!r}")
        out.extend(f"{name}.{extra}: extra" for extra in mine)
    else:
        assert isinstance(ours, descriptor_pb2.EnumDescriptorProto)
        values = {v.name: v.number for v in ours.value}
        for value in upstream.value:
            number = values.pop(value.name, None)
            where = f"{name}.{value.name}"
            if number is None:
                out.append(f"{where}: missing")
            elif number != value.number:
                out.append(f"{where}: number {number} != {value.number}")
        out.extend(f"{name}.{extra}: extra" for extra in values)
    return out


def compute_differences(upstream: Types, ours: Types) -> list[str]:
    """Every difference between two packages' types (full name -> (file, descriptor))."""
    out = [
        f"{n}: missing (upstream in {upstream[n][0]})" for n in sorted(set(upstream) - set(ours))
    ]
    out += [
        f"{n}: extra (keepersim's {ours[n][0]}; the vendored files lack it)"
        for n in sorted(set(ours) - set(upstream))
    ]
    for name in sorted(set(upstream) & set(ours)):
        (up_file, up_type), (our_file, our_type) = upstream[name], ours[name]
        if up_file != our_file:
            out.append(f"{name}: file {our_file} != {up_file}")
        out.extend(compute_type_differences(name, up_type, our_type))
    return out


def compute_item_count(types: Types) -> int:
    """Fields and enum values over ``types``."""
    return sum(
        len(t.field) if isinstance(t, descriptor_pb2.DescriptorProto) else len(t.value)
        for _, t in types.values()
    )


@pytest.fixture(scope="session")
def vendored_files(
    tmp_path_factory: pytest.TempPathFactory,
) -> list[descriptor_pb2.FileDescriptorProto]:
    """proto/inference/inference/*.proto, compiled once per session (one protoc call)."""
    return list(compute_chain_descriptor_set(tmp_path_factory.mktemp("chain_protos")).file)


@pytest.fixture(scope="session")
def vendored_types(vendored_files: list[descriptor_pb2.FileDescriptorProto]) -> Types:
    return compute_all_types(vendored_files)


@needs_protoc
def test_every_generated_type_of_the_chains_package_is_the_vendored_one(
    vendored_types: Types,
) -> None:
    """The issue's Must-hold: every generated descriptor of the shared messages equals the
    vendored upstream .proto, field by field and enum value by enum value (all of the package,
    not only the 20)."""
    ours = compute_all_types(get_generated_files(KEEPERSIM_CHAIN_PACKAGE))
    absent = [n for n in SHARED_TYPES if f"{PACKAGE}.{n}" not in vendored_types]
    assert not absent, f"not in the vendored protos: {absent}"
    differences = compute_differences(vendored_types, ours)
    assert not differences, (
        f"{len(differences)} differences between keepersim's generated code and "
        f"{CHAIN_PROTO_DIR.relative_to(ROOT)} (keepersim != upstream); regenerate with "
        "python scripts/gen_proto.py:\n" + "\n".join(differences)
    )
    assert compute_item_count(ours) == compute_item_count(vendored_types) > 0


@needs_protoc
def test_generated_modules_are_exactly_the_vendored_files(
    vendored_files: list[descriptor_pb2.FileDescriptorProto],
) -> None:
    """No generated module of inference.inference is keepersim's own (nor a vendored file left
    uncompiled)."""
    ours = {f.name for f in get_generated_files(KEEPERSIM_CHAIN_PACKAGE)}
    theirs = {f.name for f in vendored_files if f.package == PACKAGE}
    assert ours == theirs, {"keepersim only": ours - theirs, "vendored only": theirs - ours}
    assert {f.package for f in get_generated_files(KEEPERSIM_CHAIN_PACKAGE)} == {PACKAGE}


@needs_protoc
def test_keepersims_own_package_reuses_no_chain_name(vendored_types: Types) -> None:
    """keepersim.v1 names none of its messages or enums (nested ones included) like a type of
    inference.inference, so no reader can take one for the other."""
    own = compute_all_types(get_generated_files(KEEPERSIM_OWN_PACKAGE), "keepersim.v1")
    assert own, "keepersim.v1 defines no type"
    chain_names = {n.rsplit(".", 1)[1] for n in vendored_types}
    reused = sorted(n for n in own if n.rsplit(".", 1)[1] in chain_names)
    assert not reused, f"keepersim.v1 reuses chain names: {reused}"


def test_comparison_reports_each_kind_of_difference() -> None:
    """The comparison itself: renumbered, retyped, relabelled, moved in or out of a oneof,
    missing and extra fields and values, and missing, extra and moved types each give their
    line; identical types give none."""
    up = descriptor_pb2.DescriptorProto(name="M")
    up.oneof_decl.add(name="choice")
    up.field.add(name="a", number=1, type=FDP.TYPE_UINT64, label=FDP.LABEL_OPTIONAL)
    up.field.add(name="b", number=2, type=FDP.TYPE_MESSAGE, type_name=".p.Decimal", label=1)
    up.field.add(name="c", number=3, type=FDP.TYPE_STRING, label=FDP.LABEL_REPEATED)
    up.field.add(name="d", number=4, type=FDP.TYPE_INT32, label=FDP.LABEL_OPTIONAL)
    up.field.add(name="o", number=6, type=FDP.TYPE_BOOL, label=1, oneof_index=0)
    ours = descriptor_pb2.DescriptorProto(name="M")
    ours.field.add(name="a", number=5, type=FDP.TYPE_INT64, label=FDP.LABEL_OPTIONAL)
    ours.field.add(name="b", number=2, type=FDP.TYPE_MESSAGE, type_name=".q.Decimal", label=1)
    ours.field.add(name="c", number=3, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    ours.field.add(name="e", number=4, type=FDP.TYPE_INT32, label=FDP.LABEL_OPTIONAL)
    ours.field.add(name="o", number=6, type=FDP.TYPE_BOOL, label=1)
    assert compute_type_differences("M", up, ours) == [
        "M.a: number 5 != 1",
        "M.a: type 'int64' != 'uint64'",
        "M.b: type_name '.q.Decimal' != '.p.Decimal'",
        "M.c: label 'optional' != 'repeated'",
        "M.d: missing",
        "M.o: oneof None != 'choice'",
        "M.e: extra",
    ]
    assert compute_type_differences("M", up, up) == []
    enum_up = descriptor_pb2.EnumDescriptorProto(name="E")
    for i, value in enumerate(["UNSPECIFIED", "ACTIVE", "RAMPING"]):
        enum_up.value.add(name=value, number=i)
    enum_ours = descriptor_pb2.EnumDescriptorProto(name="E")
    enum_ours.value.add(name="E_UNSPECIFIED", number=0)
    enum_ours.value.add(name="ACTIVE", number=2)
    assert compute_type_differences("E", enum_up, enum_ours) == [
        "E.UNSPECIFIED: missing",
        "E.ACTIVE: number 2 != 1",
        "E.RAMPING: missing",
        "E.E_UNSPECIFIED: extra",
    ]
    assert compute_type_differences("E", enum_up, up) == ["E: kind Message != Enum"]
    upstream: Types = {"p.M": ("a.proto", up), "p.E": ("a.proto", enum_up)}
    theirs: Types = {"p.M": ("b.proto", up), "p.X": ("a.proto", enum_up)}
    assert compute_differences(upstream, theirs) == [
        "p.E: missing (upstream in a.proto)",
        "p.X: extra (keepersim's a.proto; the vendored files lack it)",
        "p.M: file b.proto != a.proto",
    ]
    assert compute_differences(upstream, dict(upstream)) == []


def test_all_types_include_nested_ones() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="a.proto", package="p")
    outer = file.message_type.add(name="Outer")
    outer.nested_type.add(name="Inner").enum_type.add(name="Kind")
    file.enum_type.add(name="Top")
    other = descriptor_pb2.FileDescriptorProto(name="b.proto", package="q")
    other.message_type.add(name="Elsewhere")
    assert sorted(compute_all_types([file, other], "p")) == [
        "p.Outer",
        "p.Outer.Inner",
        "p.Outer.Inner.Kind",
        "p.Top",
    ]


# --------------------------------------------------------------------------------------------
# The vendored files and the vendoring script (no mirror needed but for the freshness test)
# --------------------------------------------------------------------------------------------


def get_manifest_commit(script: ModuleType) -> str:
    manifest = (CHAIN_PROTO_ROOT / script.MANIFEST).read_text()
    commit = re.search(r"^- commit: ([0-9a-f]{40})$", manifest, re.MULTILINE)
    assert commit is not None, f"{script.MANIFEST}: no '- commit: <40 hex>' line"
    return commit.group(1)


def get_non_nullable_file(script: ModuleType) -> list[str]:
    """The entries of proto/inference/non_nullable_fields.txt (comment lines skipped)."""
    text = (CHAIN_PROTO_ROOT / script.NON_NULLABLE_FILE).read_text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_vendored_files_name_the_pinned_commit_and_the_manifest_lists_them() -> None:
    """Each file starts with the script's header at the manifest's commit, and UPSTREAM.md
    lists exactly the vendored files, each with a blob id."""
    script = get_vendor_script()
    commit = get_manifest_commit(script)
    assert commit.startswith(PINNED_COMMIT)
    manifest = (CHAIN_PROTO_ROOT / script.MANIFEST).read_text()
    rows = dict(
        re.findall(r"^\| `inference-chain/proto/(\S+)` \| `([0-9a-f]{40})` \|$", manifest, re.M)
    )
    on_disk = sorted(p.relative_to(CHAIN_PROTO_ROOT).as_posix() for p in CHAIN_PROTO_DIR.rglob("*"))
    assert sorted(rows) == on_disk == sorted(script.SET_B)
    for path in on_disk:
        text = (CHAIN_PROTO_ROOT / path).read_text()
        assert text.startswith(script.compute_header(path, commit)), path
    assert (CHAIN_PROTO_ROOT / script.NON_NULLABLE_FILE).read_text() == (
        script.compute_non_nullable_text(commit, get_non_nullable_file(script))
    ), f"{script.NON_NULLABLE_FILE} is not as the script writes it (sorted, with its header)"


@needs_protoc
def test_chain_json_non_nullable_fields_equal_the_vendored_list(
    vendored_types: Types,
) -> None:
    """One list: chain_json's literal is the one the vendoring script read from upstream's
    options, and each entry is a singular message field of a vendored message."""
    script = get_vendor_script()
    listed = get_non_nullable_file(script)
    assert sorted(NON_NULLABLE_FIELDS) == listed, (
        f"keepersim.types.chain_json.NON_NULLABLE_FIELDS != {script.NON_NULLABLE_FILE}: "
        f"only in chain_json {sorted(NON_NULLABLE_FIELDS - set(listed))}, "
        f"only in the file {sorted(set(listed) - NON_NULLABLE_FIELDS)}"
    )
    for entry in listed:
        message_name, field_name = entry.rsplit(".", 1)
        assert message_name in vendored_types, entry
        message = vendored_types[message_name][1]
        assert isinstance(message, descriptor_pb2.DescriptorProto), entry
        field = next((f for f in message.field if f.name == field_name), None)
        assert field is not None, entry
        assert field.type == FDP.TYPE_MESSAGE and field.label != FDP.LABEL_REPEATED, entry


def test_non_nullable_fields_are_read_from_the_options() -> None:
    """Singular message fields with the option (nested messages and oneofs by their message's
    path) are listed; repeated, map and scalar fields, ``= true``, and comments are not."""
    script = get_vendor_script()
    source = (
        'syntax = "proto3";\n'
        "package p.q;\n"
        "// Decimal d = 9 [(gogoproto.nullable) = false];\n"
        "/* Decimal e = 9 [(gogoproto.nullable) = false]; */\n"
        "message A {\n"
        "  option (gogoproto.equal) = true;\n"
        "  Decimal d = 1 [(gogoproto.nullable) = false, (amino.dont_omitempty) = true];\n"
        "  repeated Decimal r = 2 [(gogoproto.nullable) = false];\n"
        "  map<string, Decimal> m = 3 [(gogoproto.nullable) = false];\n"
        "  int64 n = 4 [(gogoproto.nullable) = false];\n"
        "  Decimal t = 5 [(gogoproto.nullable) = true];\n"
        "  .p.q.Decimal  full =  6 [ ( gogoproto.nullable )=false ];\n"
        "  message B { Decimal inner = 1 [(gogoproto.nullable) = false]; }\n"
        "  oneof choice {\n"
        "    Decimal one = 7 [(gogoproto.nullable) = false];\n"
        "  }\n"
        "  Decimal plain = 8;\n"
        "}\n"
        "enum E { X = 0; }\n"
    )
    assert script.compute_non_nullable_fields("x.proto", source) == [
        "p.q.A.d",
        "p.q.A.full",
        "p.q.A.B.inner",
        "p.q.A.one",
    ]
    with pytest.raises(script.VendorError, match="x.proto: unbalanced"):
        script.compute_non_nullable_fields("x.proto", "package p;\nmessage A {\n")


def test_stripping_rule_keeps_upstream_text_but_options_and_unused_imports() -> None:
    script = get_vendor_script()
    upstream = {
        "inference/inference/params.proto": "message Decimal {}\nmessage Params {}\n",
        "inference/inference/model.proto": "message Model {}\n",
    }
    source = (
        'syntax = "proto3";\n'
        'import "gogoproto/gogo.proto";\n'
        'import "inference/inference/params.proto";\n'
        'import "inference/inference/model.proto";\n'
        'option go_package = "x/types";\n'
        "message A {\n"
        "  option (gogoproto.equal) = true;\n"
        '  string url = 1 [(gogoproto.moretags) = "a,b"]; // see https://x/[y]\n'
        "  Decimal d = 2 [(gogoproto.nullable) = false, deprecated = true];\n"
        "  int64 n = 3;   \n"
        "  // Model is not used here\n"
        "}\n"
    )
    assert script.compute_stripped("inference/inference/a.proto", source, upstream) == (
        'syntax = "proto3";\n'
        'import "inference/inference/params.proto";\n'
        'option go_package = "x/types";\n'
        "message A {\n"
        "  string url = 1; // see https://x/[y]\n"
        "  Decimal d = 2 [deprecated = true];\n"
        "  int64 n = 3;   \n"
        "  // Model is not used here\n"
        "}\n"
    )
    with pytest.raises(script.VendorError, match="a.proto:2"):
        script.compute_stripped("inference/inference/a.proto", "message A {\n  int32 x = 1 [\n", {})


@pytest.mark.skipif(
    not MIRROR.is_dir(), reason=f"no gonka mirror at {MIRROR} (set KEEPERSIM_GONKA_GIT_DIR)"
)
def test_vendored_copies_are_fresh() -> None:
    """With the mirror: the committed files (protos, UPSTREAM.md, the non-nullable list) are
    exactly what the script writes from the pinned commit."""
    done = subprocess.run(
        [
            sys.executable,
            str(VENDOR_SCRIPT),
            "--git-dir",
            str(MIRROR),
            "--commit",
            PINNED_COMMIT,
            "--check",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr

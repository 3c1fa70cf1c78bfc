"""keepersim's descriptors of the 20 types it shares with the chain, against the chain's own
protos (the reference copy in proto/chain, gonka ee730031; scripts/vendor_chain_protos.py).

Every field (name, number, type, label) and every enum value (name, number) is compared. The
differences are a ratchet: tests/core/chain_conformance_known.txt lists those that remain, and the
test fails both on a new one (a regression) and on a listed one that is gone (the list must shrink
as the migration of issue 12 proceeds). Rewrite the list after fixing types with
``python tests/core/test_chain_conformance.py --write``.
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
    CHAIN_PROTO_ROOT,
    TypeProto,
    compute_chain_descriptor_set,
    compute_package_types,
    needs_protoc,
)
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
KNOWN_FILE = Path(__file__).with_name("chain_conformance_known.txt")
VENDOR_SCRIPT = ROOT / "scripts" / "vendor_chain_protos.py"
#: A bare mirror of gonka holding the pinned commit (absent on CI: the freshness test skips).
MIRROR = Path(os.environ.get("KEEPERSIM_GONKA_GIT_DIR", "/work/.mirror/kaitakuai+gonka/repo"))
PINNED_COMMIT = "ee730031"
KEEPERSIM_PACKAGE = "keepersim.types.pb.inference.inference"
#: The 20 types of issue 12 (docs/design/chain-types-v0.2.14.md section 1).
SHARED_MESSAGES = (
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
)
SHARED_ENUMS = ("ParticipantStatus", "InferenceStatus")
#: Fields and enum values of the 20 at the pinned commit (section 1's summary).
UPSTREAM_ITEMS_AT_EE730031 = 214
COUNTS_RE = re.compile(r"^# counts: upstream (\d+), matching (\d+)$")

FDP = descriptor_pb2.FieldDescriptorProto


def get_vendor_script() -> ModuleType:
    """scripts/vendor_chain_protos.py as a module (its file list and header are the rule)."""
    spec = importlib.util.spec_from_file_location("vendor_chain_protos", VENDOR_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_keepersim_files() -> list[descriptor_pb2.FileDescriptorProto]:
    """keepersim's generated files of package inference.inference, as descriptor protos."""
    package = importlib.import_module(KEEPERSIM_PACKAGE)
    files = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.endswith("_pb2"):
            module = importlib.import_module(f"{KEEPERSIM_PACKAGE}.{info.name}")
            proto = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(proto)
            files.append(proto)
    return files


def compute_field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    """A field's type: the scalar kind, or the referenced message or enum by short name."""
    if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
        return field.type_name.rsplit(".", 1)[-1]
    return FDP.Type.Name(field.type).removeprefix("TYPE_").lower()


def compute_upstream_items(name: str, upstream: TypeProto) -> list[str]:
    """The items of one upstream type, ``Type.field`` or ``Enum.VALUE``."""
    members = (
        upstream.field if isinstance(upstream, descriptor_pb2.DescriptorProto) else upstream.value
    )
    return [f"{name}.{m.name}" for m in members]


def compute_type_differences(name: str, upstream: TypeProto, ours: TypeProto | None) -> list[str]:
    """One line per difference between an upstream type and keepersim's type of the same name."""
    if ours is None or type(ours) is not type(upstream):
        return [f"{item}: missing" for item in compute_upstream_items(name, upstream)]
    out: list[str] = []
    if isinstance(upstream, descriptor_pb2.DescriptorProto):
        assert isinstance(ours, descriptor_pb2.DescriptorProto)
        mine = {f.name: f for f in ours.field}
        for field in upstream.field:
            other = mine.pop(field.name, None)
            where = f"{name}.{field.name}"
            if other is None:
                out.append(f"{where}: missing")
                continue
            if other.number != field.number:
                out.append(f"{where}: number {other.number} != {field.number}")
            if compute_field_type(other) != compute_field_type(field):
                out.append(
                    f"{where}: type {compute_field_type(other)} != {compute_field_type(field)}"
                )
            if other.label != field.label:
                labels = [
                    FDP.Label.Name(x.label).removeprefix("LABEL_").lower() for x in (other, field)
                ]
                out.append(f"{where}: label {labels[0]} != {labels[1]}")
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


def compute_differences(upstream: dict[str, TypeProto], ours: dict[str, TypeProto]) -> list[str]:
    """The sorted differences over the 20 shared types."""
    out: list[str] = []
    for name in (*SHARED_MESSAGES, *SHARED_ENUMS):
        out.extend(compute_type_differences(name, upstream[name], ours.get(name)))
    return sorted(out)


def compute_counts(upstream: dict[str, TypeProto], differences: list[str]) -> tuple[int, int]:
    """(upstream items in the 20, items that match): an item matches when no line but ``extra``
    names it."""
    total = sum(
        len(compute_upstream_items(n, upstream[n])) for n in (*SHARED_MESSAGES, *SHARED_ENUMS)
    )
    differing = {d.split(": ", 1)[0] for d in differences if not d.endswith(": extra")}
    return total, total - len(differing)


def get_known() -> tuple[list[str], tuple[int, int] | None]:
    """The ratchet file's differences (in file order) and its ``# counts:`` line."""
    lines, counts = [], None
    for line in KNOWN_FILE.read_text().splitlines():
        found = COUNTS_RE.match(line)
        if found:
            counts = (int(found.group(1)), int(found.group(2)))
        elif line.strip() and not line.startswith("#"):
            lines.append(line)
    return lines, counts


def compute_known_text(differences: list[str], total: int, matching: int) -> str:
    """The ratchet file as --write writes it."""
    head = (
        "# The migration's to-do list (issue 12): every difference between keepersim's generated\n"
        "# descriptors and the chain's vendored protos (proto/chain, gonka ee730031) over the 20\n"
        "# shared messages and enums, as `keepersim != upstream`. Fix a type, then delete its lines:\n"
        "# tests/core/test_chain_conformance.py fails on a new difference and on a listed one that\n"
        "# no longer exists. Rewrite with: python tests/core/test_chain_conformance.py --write\n"
        f"# counts: upstream {total}, matching {matching}\n"
    )
    return head + "".join(f"{d}\n" for d in differences)


@pytest.fixture(scope="session")
def differences(chain_types: dict[str, TypeProto]) -> list[str]:
    return compute_differences(chain_types, compute_package_types(get_keepersim_files()))


@needs_protoc
def test_shared_descriptors_differ_only_as_the_ratchet_lists(
    chain_types: dict[str, TypeProto], differences: list[str]
) -> None:
    known, _ = get_known()
    total, matching = compute_counts(chain_types, differences)
    new = sorted(set(differences) - set(known))
    gone = sorted(set(known) - set(differences))
    assert not new and not gone, (
        f"upstream items {total}, matching {matching}\n"
        f"new differences (regressions; fix them): {new}\n"
        f"listed differences that are gone (delete them from {KNOWN_FILE.name}): {gone}\n"
        "rewrite the list with: python tests/core/test_chain_conformance.py --write"
    )


@needs_protoc
def test_counts_of_upstream_and_matching_items(
    chain_types: dict[str, TypeProto], differences: list[str]
) -> None:
    missing = [n for n in (*SHARED_MESSAGES, *SHARED_ENUMS) if n not in chain_types]
    assert not missing, f"not in the vendored protos: {missing}"
    total, matching = compute_counts(chain_types, differences)
    _, counts = get_known()
    message = f"upstream items {total}, matching {matching}; {KNOWN_FILE.name} says {counts}"
    assert total == UPSTREAM_ITEMS_AT_EE730031, message
    assert counts == (total, matching), message


def test_ratchet_file_is_sorted_without_duplicates() -> None:
    known, counts = get_known()
    assert counts is not None, f"{KNOWN_FILE.name} has no '# counts: upstream N, matching M' line"
    assert known == sorted(set(known)), f"{KNOWN_FILE.name}: keep one difference a line, sorted"


def test_comparison_reports_each_kind_of_difference() -> None:
    """The comparison itself: renumbered, retyped, relabelled, missing and extra fields and
    values each give their line; identical types give none."""
    up = descriptor_pb2.DescriptorProto(name="M")
    up.field.add(name="a", number=1, type=FDP.TYPE_UINT64, label=FDP.LABEL_OPTIONAL)
    up.field.add(name="b", number=2, type=FDP.TYPE_MESSAGE, type_name=".p.Decimal", label=1)
    up.field.add(name="c", number=3, type=FDP.TYPE_STRING, label=FDP.LABEL_REPEATED)
    up.field.add(name="d", number=4, type=FDP.TYPE_INT32, label=FDP.LABEL_OPTIONAL)
    ours = descriptor_pb2.DescriptorProto(name="M")
    ours.field.add(name="a", number=5, type=FDP.TYPE_INT64, label=FDP.LABEL_OPTIONAL)
    ours.field.add(name="b", number=2, type=FDP.TYPE_MESSAGE, type_name=".q.Decimal", label=1)
    ours.field.add(name="c", number=3, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    ours.field.add(name="e", number=4, type=FDP.TYPE_INT32, label=FDP.LABEL_OPTIONAL)
    assert compute_type_differences("M", up, ours) == [
        "M.a: number 5 != 1",
        "M.a: type int64 != uint64",
        "M.c: label optional != repeated",
        "M.d: missing",
        "M.e: extra",
    ]
    assert compute_type_differences("M", up, up) == []
    assert compute_type_differences("M", up, None) == [f"M.{x}: missing" for x in "abcd"]
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
    diffs = ["M.a: number 5 != 1", "M.a: type int64 != uint64", "M.d: missing", "M.e: extra"]
    assert compute_counts({n: up for n in (*SHARED_MESSAGES, *SHARED_ENUMS)}, diffs) == (80, 78)


def test_vendored_files_name_the_pinned_commit_and_the_manifest_lists_them() -> None:
    """No mirror needed: each file starts with the script's header at the manifest's commit, and
    UPSTREAM.md lists exactly the vendored files, each with a blob id."""
    script = get_vendor_script()
    manifest = (CHAIN_PROTO_ROOT / script.MANIFEST).read_text()
    commit = re.search(r"^- commit: ([0-9a-f]{40})$", manifest, re.MULTILINE)
    assert commit is not None, f"{script.MANIFEST}: no '- commit: <40 hex>' line"
    assert commit.group(1).startswith(PINNED_COMMIT)
    rows = dict(
        re.findall(r"^\| `inference-chain/proto/(\S+)` \| `([0-9a-f]{40})` \|$", manifest, re.M)
    )
    on_disk = sorted(
        p.relative_to(CHAIN_PROTO_ROOT).as_posix() for p in CHAIN_PROTO_ROOT.rglob("*.proto")
    )
    assert sorted(rows) == on_disk == sorted(script.SET_B)
    for path in on_disk:
        text = (CHAIN_PROTO_ROOT / path).read_text()
        assert text.startswith(script.compute_header(path, commit.group(1))), path


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


def main() -> int:
    """``--write``: rewrite the ratchet file from the current descriptors."""
    import tempfile

    if sys.argv[1:] != ["--write"]:
        print("usage: python tests/core/test_chain_conformance.py --write", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        upstream = compute_package_types(list(compute_chain_descriptor_set(Path(tmp)).file))
    differences = compute_differences(upstream, compute_package_types(get_keepersim_files()))
    total, matching = compute_counts(upstream, differences)
    tmp_file = KNOWN_FILE.with_name(KNOWN_FILE.name + ".tmp")
    tmp_file.write_text(compute_known_text(differences, total, matching))
    tmp_file.replace(KNOWN_FILE)
    print(
        f"wrote {KNOWN_FILE} ({len(differences)} differences; upstream {total}, matching {matching})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

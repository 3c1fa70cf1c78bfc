"""Vendor the chain's protos (gonka ``inference-chain/proto``, "set B"), compiled into keepersim.

Copies the 18 upstream files of docs/design/chain-types-v0.2.14.md section 2.3, plus
``confirmation_poc_event.proto`` (the ``confirmation_poc_events`` route's message), into
``proto/inference/inference/`` with the spec's stripping rule: ``option (...)`` lines and
``(...)`` entries inside ``[...]`` are dropped (``deprecated`` and standard options stay), and so
are the imports nothing in the file uses any more (gogoproto, amino, cosmos_proto, cosmos.msg, and
inference files whose types the file does not name). Everything else is upstream's text. Each file
gets a header naming its upstream path and commit; ``proto/inference/UPSTREAM.md`` records the
repository, the commit and each file's git blob id.

scripts/gen_proto.py compiles the copies into ``keepersim.types.pb.inference.inference``, so the
chain's messages in keepersim are upstream's field for field (tests/core/test_chain_conformance.py
compiles the copies afresh and compares).

One option changes what the chain prints: a singular message field marked
``(gogoproto.nullable) = false`` is a Go value, never ``null`` in the gateway's JSON. Stripping
loses it, so the script first reads those fields from upstream's text and writes them, one
``package.Message.field`` a line, to ``proto/inference/non_nullable_fields.txt`` (the list
``keepersim.types.chain_json.NON_NULLABLE_FIELDS`` must equal; repeated and map fields need no
entry).

    python scripts/vendor_chain_protos.py --git-dir /path/to/gonka.git --commit ee730031
    python scripts/vendor_chain_protos.py /path/to/gonka-checkout
    ... --check   # exit 1 when the committed copies differ from what would be written
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The upstream proto root's counterpart: set B lands in proto/inference/inference/.
OUT_ROOT = ROOT / "proto"
#: The folder (under OUT_ROOT) the script owns: everything in it is what the script writes.
OUT_FOLDER = "inference"
#: Where the .proto files sit inside the upstream repository (their import root).
UPSTREAM_PROTO_ROOT = "inference-chain/proto"
UPSTREAM_REPO = "gonka-ai/gonka"
#: Set B (section 2.3): the 20 shared types, their closure, and tx.proto's imports; and
#: confirmation_poc_event.proto (ListConfirmationPoCEvents, query.proto:422 at ee730031).
SET_B = tuple(
    f"inference/inference/{name}.proto"
    for name in (
        "bridge",
        "claim_recipient",
        "confirmation_poc_event",
        "devshard_escrow",
        "epoch",
        "epoch_group_data",
        "epoch_performance_summary",
        "excluded_participant",
        "genesis",
        "hardware_node",
        "inference",
        "inference_timeout",
        "mlnode_version",
        "model",
        "params",
        "participant",
        "poc_delegation",
        "poc_v2",
        "tx",
    )
)
#: Imports that only bring custom options; they are unused once the options are stripped.
OPTION_ONLY_IMPORTS = frozenset(
    [
        "gogoproto/gogo.proto",
        "amino/amino.proto",
        "cosmos_proto/cosmos.proto",
        "cosmos/msg/v1/msg.proto",
    ]
)
MANIFEST = f"{OUT_FOLDER}/UPSTREAM.md"
NON_NULLABLE_FILE = f"{OUT_FOLDER}/non_nullable_fields.txt"
#: Scalar field types: ``(gogoproto.nullable) = false`` on one changes nothing in JSON.
SCALAR_TYPES = frozenset(
    [
        "double",
        "float",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
        "bool",
        "string",
        "bytes",
    ]
)
IMPORT_RE = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;\s*(//.*)?$')
OPTION_LINE_RE = re.compile(r"^\s*option\s*\(")
TYPE_DEF_RE = re.compile(r"^\s*(?:message|enum)\s+(\w+)", re.MULTILINE)


class VendorError(Exception):
    """A source that cannot be vendored; the message names the file and what is wrong."""


def compute_blob_id(data: bytes) -> str:
    """Git's blob id of ``data`` (so a plain checkout can be checked against the commit)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def compute_split_comment(line: str) -> tuple[str, str]:
    """Split a line into code and its ``//`` comment, ignoring ``//`` inside string literals."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif line.startswith("//", i):
            return line[:i], line[i:]
        i += 1
    return line, ""


def compute_split_entries(text: str) -> list[str]:
    """Split the inside of ``[...]`` at top-level commas (not inside strings or parentheses)."""
    entries, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
        i += 1
    entries.append(text[start:])
    return entries


def compute_stripped_brackets(code: str, where: str) -> str:
    """Drop the ``(...)`` entries of a field's ``[...]`` options, and the brackets if emptied."""
    if "[" not in code:
        return code
    match = re.fullmatch(r"(.*?)(\s*)\[(.*)\](\s*;.*)", code, re.DOTALL)
    if match is None or "[" in match.group(3):
        raise VendorError(f"{where}: field options are not one [...] before ';': {code.strip()}")
    head, space, inner, tail = match.groups()
    kept = [e.strip() for e in compute_split_entries(inner) if not e.strip().startswith("(")]
    if not kept:
        return head + tail
    return f"{head}{space}[{', '.join(kept)}]{tail}"


def compute_defined_types(text: str) -> set[str]:
    """The message and enum names a .proto file defines (at any nesting depth)."""
    return set(TYPE_DEF_RE.findall(text))


def compute_code_without_comments_and_strings(text: str) -> str:
    """The file's code with comments and string literals blanked (for the used-type check)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    lines = [compute_split_comment(line)[0] for line in text.splitlines()]
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', "\n".join(lines))


def is_import_used(imported: str, code: str, read_upstream: dict[str, str]) -> bool:
    """Whether ``code`` (an importing file, imports removed) names a type of ``imported``."""
    if imported in OPTION_ONLY_IMPORTS:
        return False
    if imported.startswith("google/protobuf/"):
        stem = Path(imported).stem.replace("_", "")
        return re.search(rf"\bgoogle\.protobuf\.(?i:{stem})\w*\b", code) is not None
    if imported not in read_upstream:
        raise VendorError(f"{imported}: imported but not in the upstream proto tree")
    names = compute_defined_types(read_upstream[imported])
    return any(re.search(rf"(?<![\w]){re.escape(n)}(?!\w)", code) for n in names)


def compute_stripped(path: str, text: str, read_upstream: dict[str, str]) -> str:
    """Apply the stripping rule to one upstream file (section 2.3); raise on what it cannot read."""
    lines = text.splitlines()
    out: list[str] = []
    imports: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        code, comment = compute_split_comment(line)
        if OPTION_LINE_RE.match(code):
            if not code.rstrip().endswith(";"):
                raise VendorError(f"{where}: an option (...) line that does not end in ';'")
            continue
        found = IMPORT_RE.match(line)
        if found:
            imports.append((len(out), found.group(1)))
        stripped = compute_stripped_brackets(code, where)
        out.append(line if stripped == code else (stripped + comment).rstrip())
    import_rows = {i for i, _ in imports}
    code = compute_code_without_comments_and_strings(
        "\n".join(x for i, x in enumerate(out) if i not in import_rows)
    )
    dropped = {i for i, name in imports if not is_import_used(name, code, read_upstream)}
    kept = [x for i, x in enumerate(out) if i not in dropped]
    for i, name in imports:
        if i not in dropped and name not in SET_B and not name.startswith("google/protobuf/"):
            raise VendorError(f"{path}: uses types of {name}, which set B does not vendor")
    return "\n".join(kept) + "\n"


def compute_header(path: str, commit: str) -> str:
    """The comment each vendored file starts with."""
    return (
        f"// Vendored from {UPSTREAM_REPO} {UPSTREAM_PROTO_ROOT}/{path}\n"
        f"// at commit {commit} by scripts/vendor_chain_protos.py: options stripped\n"
        "// (docs/design/chain-types-v0.2.14.md section 2.3); do not edit, re-run the script.\n"
    )


def compute_manifest(commit: str, blobs: dict[str, str]) -> str:
    """proto/inference/UPSTREAM.md: repository, commit, each file's upstream path and blob id."""
    rows = "\n".join(f"| `{UPSTREAM_PROTO_ROOT}/{p}` | `{blobs[p]}` |" for p in sorted(blobs))
    return (
        "# The chain's protos, vendored\n\n"
        f"- repository: {UPSTREAM_REPO}\n"
        f"- commit: {commit}\n"
        f"- files: {len(blobs)} (set B of docs/design/chain-types-v0.2.14.md section 2.3), under\n"
        "  `proto/inference/inference/`, options stripped; compiled by scripts/gen_proto.py into\n"
        "  keepersim.types.pb.inference.inference\n"
        f"- `{Path(NON_NULLABLE_FILE).name}`: the singular message fields upstream marks\n"
        "  `(gogoproto.nullable) = false` (never `null` in the chain's JSON; the stripped copies\n"
        "  lose the option), one `package.Message.field` a line\n"
        "- written by `scripts/vendor_chain_protos.py`; refresh with\n"
        "  `python scripts/vendor_chain_protos.py --git-dir GONKA.git --commit COMMIT`\n\n"
        "| upstream path | git blob id |\n"
        "|---|---|\n"
        f"{rows}\n"
    )


def compute_non_nullable_fields(path: str, text: str) -> list[str]:
    """The singular message fields of one upstream file marked ``(gogoproto.nullable) = false``,
    as ``package.Message.field`` (nested messages by their full path); read before stripping.

    Repeated and map fields are left out (their elements are never null), and so are scalars
    (the option does not change them)."""
    code = compute_code_without_comments_and_strings(text)
    package = re.search(r"^\s*package\s+([\w.]+)\s*;", code, re.MULTILINE)
    if package is None:
        raise VendorError(f"{path}: no package statement")
    scopes: list[tuple[str, str]] = []
    found: list[str] = []
    for chunk, end in re.findall(r"([^{};]*)([{};])", code):
        if end == "{":
            block = re.fullmatch(r"\s*(message|enum|oneof|service|extend)\s+([\w.]+)\s*", chunk)
            scopes.append((block.group(1), block.group(2)) if block else ("other", ""))
            continue
        if end == "}":
            if not scopes:
                raise VendorError(f"{path}: unbalanced '}}'")
            scopes.pop()
            continue
        if not scopes or scopes[-1][0] not in ("message", "oneof"):
            continue
        field = re.fullmatch(
            r"\s*(repeated\s+|optional\s+)?([\w.]+)\s+(\w+)\s*=\s*\d+\s*\[(.*)\]\s*",
            chunk,
            re.DOTALL,
        )
        if field is None or field.group(1) == "repeated " or field.group(2) in SCALAR_TYPES:
            continue  # not a field with options, a map (no name match), repeated or a scalar
        entries = {re.sub(r"\s+", "", e) for e in compute_split_entries(field.group(4))}
        if "(gogoproto.nullable)=false" in entries:
            messages = [name for kind, name in scopes if kind == "message"]
            found.append(".".join([package.group(1), *messages, field.group(3)]))
    if scopes:
        raise VendorError(f"{path}: unbalanced '{{'")
    return found


def compute_non_nullable_text(commit: str, fields: list[str]) -> str:
    """proto/inference/non_nullable_fields.txt: a header, then one field a line, sorted."""
    head = (
        f"# Singular message fields marked (gogoproto.nullable) = false in {UPSTREAM_REPO}\n"
        f"# {UPSTREAM_PROTO_ROOT} at {commit},\n"
        "# over the vendored files. Written by scripts/vendor_chain_protos.py; do not edit.\n"
        "# keepersim.types.chain_json.NON_NULLABLE_FIELDS must equal this list.\n"
    )
    return head + "".join(f"{f}\n" for f in sorted(set(fields)))


def _git(git_dir: str, *args: str) -> bytes:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True)
    if done.returncode != 0:
        raise VendorError(f"git {' '.join(args)} in {git_dir}: {done.stderr.decode().strip()}")
    return done.stdout


def get_upstream_from_git(git_dir: str, commit: str) -> tuple[str, dict[str, bytes]]:
    """The full commit id and {path under the proto root: bytes} of every .proto at ``commit``
    (one ``git cat-file --batch`` for all of them)."""
    full = _git(git_dir, "rev-parse", "--verify", f"{commit}^{{commit}}").decode().strip()
    listing = _git(git_dir, "ls-tree", "-r", full, f"{UPSTREAM_PROTO_ROOT}/").decode()
    rows = [line.split("\t", 1) for line in listing.splitlines()]
    wanted = [(meta.split()[2], name) for meta, name in rows if name.endswith(".proto")]
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
        input="".join(f"{blob}\n" for blob, _ in wanted).encode(),
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise VendorError(f"git cat-file in {git_dir}: {done.stderr.decode().strip()}")
    files: dict[str, bytes] = {}
    pos = 0
    for _blob, name in wanted:
        end = done.stdout.index(b"\n", pos)
        size = int(done.stdout[pos:end].split()[2])
        files[name[len(UPSTREAM_PROTO_ROOT) + 1 :]] = done.stdout[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return full, files


def get_upstream_from_checkout(source: Path, commit: str | None) -> tuple[str, dict[str, bytes]]:
    """Like get_upstream_from_git, from a work tree; its set-B files must equal the commit's."""
    proto_root = source / UPSTREAM_PROTO_ROOT
    if not proto_root.is_dir():
        raise VendorError(f"{source}: no {UPSTREAM_PROTO_ROOT}/ folder (expected a gonka checkout)")
    files = {
        p.relative_to(proto_root).as_posix(): p.read_bytes() for p in proto_root.rglob("*.proto")
    }
    git_dir = _git(str(source / ".git"), "rev-parse", "--absolute-git-dir").decode().strip()
    full = _git(git_dir, "rev-parse", "--verify", f"{commit or 'HEAD'}^{{commit}}").decode().strip()
    for path in SET_B:
        want = _git(git_dir, "rev-parse", f"{full}:{UPSTREAM_PROTO_ROOT}/{path}").decode().strip()
        if path in files and compute_blob_id(files[path]) != want:
            raise VendorError(f"{proto_root / path}: differs from commit {full[:12]} (modified?)")
    return full, files


def compute_vendored(commit: str, upstream: dict[str, bytes]) -> dict[str, str]:
    """{path under proto/: text} for set B, the manifest and the non-nullable field list."""
    missing = [p for p in SET_B if p not in upstream]
    if missing:
        raise VendorError(f"commit {commit[:12]} lacks {', '.join(missing)}")
    texts = {p: data.decode("utf-8") for p, data in upstream.items()}
    out = {p: compute_header(p, commit) + compute_stripped(p, texts[p], texts) for p in SET_B}
    out[MANIFEST] = compute_manifest(commit, {p: compute_blob_id(upstream[p]) for p in SET_B})
    fields = [f for p in SET_B for f in compute_non_nullable_fields(p, texts[p])]
    out[NON_NULLABLE_FILE] = compute_non_nullable_text(commit, fields)
    return out


def get_committed() -> set[str]:
    """The files now under proto/inference (paths relative to proto/)."""
    folder = OUT_ROOT / OUT_FOLDER
    if not folder.is_dir():
        return set()
    return {p.relative_to(OUT_ROOT).as_posix() for p in folder.rglob("*") if p.is_file()}


def process_write(files: dict[str, str]) -> None:
    """Replace proto/inference with ``files``, each written atomically (temp file, then rename)."""
    for old in get_committed() - set(files):
        (OUT_ROOT / old).unlink()
    for name, text in files.items():
        target = OUT_ROOT / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", nargs="?", type=Path, help="a gonka checkout (work tree)")
    parser.add_argument("--git-dir", help="a gonka git repository (bare or not) instead of SOURCE")
    parser.add_argument("--commit", help="the commit to vendor (default: the checkout's HEAD)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the copies are stale")
    args = parser.parse_args(argv)
    if (args.source is None) == (args.git_dir is None):
        parser.error("give exactly one of SOURCE (a checkout) or --git-dir DIR --commit COMMIT")
    if args.git_dir is not None and args.commit is None:
        parser.error("--git-dir needs --commit (for example --commit ee730031)")
    try:
        if args.git_dir is not None:
            commit, upstream = get_upstream_from_git(args.git_dir, args.commit)
        else:
            commit, upstream = get_upstream_from_checkout(args.source, args.commit)
        files = compute_vendored(commit, upstream)
    except (VendorError, UnicodeDecodeError, OSError) as exc:
        print(f"vendor_chain_protos: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = sorted(
            n
            for n, t in files.items()
            if not (OUT_ROOT / n).is_file() or (OUT_ROOT / n).read_text() != t
        )
        extra = sorted(get_committed() - set(files))
        if stale or extra:
            print(
                f"stale vendored protos in proto/{OUT_FOLDER}: {stale + extra}; re-run "
                f"python scripts/vendor_chain_protos.py (commit {commit[:12]})"
            )
            return 1
        print(f"proto/{OUT_FOLDER} matches {UPSTREAM_REPO} {commit[:12]} ({len(SET_B)} files)")
        return 0
    process_write(files)
    print(
        f"wrote {len(files)} files to {(OUT_ROOT / OUT_FOLDER).relative_to(ROOT)} "
        f"({UPSTREAM_REPO} {commit[:12]})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

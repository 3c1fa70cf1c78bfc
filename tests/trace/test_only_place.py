"""keepersim/trace is the only place that reads or writes traces: no other module of keepersim (or
script) builds trace lines, knows the format's constants, or opens a trace file itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from keepersim.trace.format import RECORD_KINDS

ROOT = Path(__file__).resolve().parents[2]
# The format's internals: only keepersim/trace uses them.
_FORMAT_NAMES = frozenset({"TRACE_VERSION", "RECORD_KINDS", "LINE_ORDER", "VERSION_1_ERROR"})
_INTERNAL_MODULES = ("keepersim.trace.schema", "keepersim.trace.validate", "keepersim.trace.build")


def find_violations(source: str, name: str = "<source>") -> list[str]:
    """What in ``source`` reads or writes traces on its own (empty: nothing)."""
    out: list[str] = []
    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "type"
                    and isinstance(value, ast.Constant)
                    and value.value in RECORD_KINDS
                ):
                    out.append(f"{where}: builds a {value.value!r} trace line")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.replace(" ", "")
            if any(f'"type":"{kind}"' in text for kind in RECORD_KINDS):
                out.append(f"{where}: writes a trace line as text")
            if "trace.schema.json" in text:
                out.append(f"{where}: reads the trace schema")
        elif isinstance(node, ast.Name | ast.Attribute):
            ident = node.id if isinstance(node, ast.Name) else node.attr
            if ident in _FORMAT_NAMES:
                out.append(f"{where}: uses the format's {ident}")
        elif isinstance(node, ast.alias) and node.name in _FORMAT_NAMES:
            out.append(f"{where}: imports the format's {node.name}")
        elif isinstance(node, ast.ImportFrom) and node.module in _INTERNAL_MODULES:
            out.append(f"{where}: imports {node.module}")
        elif isinstance(node, ast.Import):
            out.extend(
                f"{where}: imports {a.name}"
                for a in node.names
                if a.name in _INTERNAL_MODULES or a.name in ("jsonschema_rs", "orjson")
            )
        if isinstance(node, ast.ImportFrom) and node.module in ("jsonschema_rs", "orjson"):
            out.append(f"{where}: imports {node.module}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "open"
        ):
            for arg in ast.walk(ast.Module(body=[ast.Expr(a) for a in node.args], type_ignores=[])):
                ident = (
                    arg.id
                    if isinstance(arg, ast.Name)
                    else arg.attr
                    if isinstance(arg, ast.Attribute)
                    else ""
                )
                if "trace" in ident.lower():
                    out.append(f"{where}: opens a trace file ({ident})")
                    break
    return out


def _sources() -> list[Path]:
    files = [p for p in (ROOT / "keepersim").rglob("*.py") if "trace" not in p.parent.parts]
    files += sorted((ROOT / "scripts").glob("*.py"))
    return sorted(files)


def test_no_module_outside_the_trace_package_reads_or_writes_traces() -> None:
    files = _sources()
    assert len(files) > 50 and ROOT / "keepersim" / "export" / "exporter.py" in files
    found = [v for path in files for v in find_violations(path.read_text("utf-8"), str(path))]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'line = {"type": "inference", **body}',
        'w(\'{"type":"epoch_summary","height":"3"}\\n\')',
        "from keepersim.trace.format import TRACE_VERSION",
        "header = {'version': fmt.TRACE_VERSION}",
        "from keepersim.trace.validate import check_line",
        "import orjson",
        "with open(self.trace_path, 'rb') as f: pass",
        "data = open(trace).read()",
        "schema = Path('keepersim/trace/schema/trace.schema.json')",
    ],
)
def test_the_check_finds_each_way_of_doing_it(source: str) -> None:
    assert find_violations(source)


def test_the_trace_package_itself_would_be_caught() -> None:
    """The package does what no one else may (so the check is not vacuous)."""
    package = ROOT / "keepersim" / "trace"
    found = [
        v
        for path in package.glob("*.py")
        for v in find_violations(path.read_text("utf-8"), str(path))
    ]
    assert any("writer.py" in v for v in found) or any("format.py" in v for v in found)
    assert any("reader.py" in v or "opens" in v for v in found)

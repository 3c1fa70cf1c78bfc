"""Random valid and broken epoch folders never end in a traceback: ``scenarios from-chain``
exits 0, or 2 with one ``keepersim: error:`` line naming a file of the folder (after any
``keepersim: warning:`` lines of the params reader)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mainnet_data import get_epoch_dirs

from keepersim import cli

ROOT = Path(__file__).resolve().parents[2]
BASE = min(
    get_epoch_dirs(),
    key=lambda p: sum(f.stat().st_size for f in p.iterdir()),
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["0", "1", "999999999999", "-1", "1.5", "", BASE.name.split("_")[1]]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in list(value.items())[:20]:
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _set(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = root
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return root


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_folders_never_traceback(
    data: st.DataObject, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / BASE.name
        shutil.copytree(BASE, folder)
        files = sorted(p for p in folder.iterdir())
        for _ in range(data.draw(st.integers(0, 3), label="mutations")):
            target = data.draw(st.sampled_from(files), label="file")
            kind = data.draw(st.sampled_from(["delete", "truncate", "value", "drop"]), label="kind")
            if not target.exists():
                continue
            if kind == "delete":
                target.unlink()
            elif kind == "truncate":
                raw = target.read_bytes()
                target.write_bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))])
            else:
                try:
                    obj = json.loads(target.read_text())
                except (ValueError, UnicodeDecodeError):
                    continue
                path = data.draw(st.sampled_from(_paths(obj)), label="path")
                if kind == "drop" and path:
                    parent = obj
                    for part in path[:-1]:
                        parent = parent[part]
                    del parent[path[-1]]
                else:
                    obj = _set(obj, path, data.draw(json_values, label="value"))
                target.write_text(json.dumps(obj))
        status = cli.main(["scenarios", "from-chain", str(folder), "--out", str(Path(tmp) / "out")])
        out, err = capsys.readouterr()
        assert status in (0, 2), err
        if status == 2:
            # Warnings of the params reader (fields filled or unknown) may come first.
            *warnings, line = err.splitlines()
            assert all(w.startswith("keepersim: warning: ") for w in warnings), err
            assert line.startswith("keepersim: error: ") and err.endswith("\n"), err
            assert str(folder) in line or "scenario" in line, err

"""The generated protobuf code in keepersim/types/pb matches proto/ (scripts/gen_proto.py --check)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

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

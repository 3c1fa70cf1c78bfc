"""The served app stands on the core layers only: importing it loads no simulator, replay,
exporter, report or CLI code (a scenario runner imports the simulator when it is used)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

UPPER_LAYERS = ("sim", "replay", "export", "report", "proposal", "cli")


def test_app_imports_no_upper_layer() -> None:
    root = Path(__file__).resolve().parents[2]
    code = (
        "import json, sys, keepersim.server.app, keepersim.server.runner; "
        "print(json.dumps(sorted({m.split('.')[1] for m in sys.modules "
        "if m.startswith('keepersim.')})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    loaded = set(json.loads(done.stdout))
    assert "server" in loaded and "chain" in loaded  # the scan sees the app's imports
    assert loaded & set(UPPER_LAYERS) == set()

"""Make the repository root importable when keepersim is not installed into the venv."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("keepersim") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

"""Bad-input corpus: helpers shared by its tests (the replay helpers build real traces)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "replay"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

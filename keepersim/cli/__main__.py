"""``python -m keepersim.cli ...``: the ``keepersim`` command (as the installed entry point)."""

from __future__ import annotations

import sys

from keepersim.cli import main

sys.exit(main())

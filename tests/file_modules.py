"""Test helper: a Python file outside the keepersim package (a script in scripts/, the docs'
example policy) imported by its path, as its users run it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file_module(path: Path, name: str) -> ModuleType:
    """The file at ``path`` as the module ``name``, registered in sys.modules (a process pool
    pickles its functions by module name). Its folder comes first on sys.path, as with
    ``python FILE``: a script imports its siblings (bench.py) as its users run it."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

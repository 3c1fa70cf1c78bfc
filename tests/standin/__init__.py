"""Stand-in gonka nodes for tests: the chain's REST gateway over keepersim-made state.

See :mod:`standin.chain_node` (the routes, knobs and upstream sources). Other test folders
import it as ``from standin.chain_node import ...`` (``tests/`` is on ``sys.path`` because
``tests/conftest.py`` is a rootdir conftest).
"""

"""Stand-in gonka nodes for tests: the chain's REST gateway over keepersim-made state.

:mod:`standin.chain_node` holds the node, the data builder, the routes and knobs, and names the
upstream sources. Other test folders import it as ``from standin.chain_node import ...``
(``tests/`` is on ``sys.path`` because ``tests/conftest.py`` is a rootdir conftest), and can
reuse the fixtures by importing them into their own conftest:
``from standin.conftest import chain_history, current_node, older_node``.
"""

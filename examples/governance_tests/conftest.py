"""The fixtures come from the keepersim.testing plugin (its pytest11 entry point once keepersim
is installed, or `pytest -p keepersim.testing`); nothing to define here."""

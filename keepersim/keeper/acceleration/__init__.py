"""The acceleration layer beneath the health rules: every speed-up that a rule's outcome must not
depend on, each proven equal to the plain form by a test (docs/architecture.md, "The
acceleration layer", lists them all with their tests).

* :mod:`.hints`: the block's hints to the chain's verdict memo (who was touched, which verdicts
  the policy handed over, whether every verdict may have moved).
* :mod:`.policy_store`: the chain's side of a policy's store (ChainPolicyStore: writing the
  block's entries, the memo handed between blocks, the checks of the tests) and the few calls a
  policy's own index (``<policy>_index.py``) makes on it.
* :mod:`.queue_index`: a policy's wake-up queue that skips the store when nothing stored is due.
* :mod:`.verdict_memo`: the chain's verdict memo between blocks (SelectionIndex, ModelTable).

The state cache beneath the block buffer (keepersim.store.cache) is the state's part of it.

Rules (keepersim/keeper/policies/<policy>.py) never import this package; a policy's index does.
"""

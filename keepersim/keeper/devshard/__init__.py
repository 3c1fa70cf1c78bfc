"""The chain side of devshard (gonka v0.2.14, commit ee730031): the escrow's slot sampling, the
nonce -> slot round-robin the settlement relies on, and the settlement's per-host stats.

Pure functions over chain data, not wired into the module yet (docs/design/devshard.md). The
gateway's off-chain health state (limiter, session picker) is ``keepersim.gateway``: it is no
part of the chain's state or its app hash.
"""

"""The devshard gateway's off-chain host health (gonka ee730031 ``devshard/cmd/devshardctl``):
the ``ParticipantRequestLimiter`` (strikes, probation, probe / shadow quarantine, token bucket)
and the session picker (nonce -> slot, skips, ghost probes).

This state lives in one gateway process (persisted to its own ``gateway.db``), never on the
chain: nothing here is stored under the module's prefixes or enters the app hash. Heights
replace wall-clock time through one param, the block time (``limiter_params``).
"""

"""``keepersim proposal``: a governance proposal file checked as the chain checks it, then every
scenario (or trace) run under the current and the proposed params on paired seeds.

* :mod:`keepersim.proposal.load`: the ``tx gov submit-proposal`` file -> a validated
  :class:`Proposal` (which part of the params it replaces), :func:`compute_proposed_params`;
* :mod:`keepersim.proposal.compare`: the paired runs (through :mod:`keepersim.runs`; traces
  through what-if) and the paired differences with their CIs;
* :mod:`keepersim.proposal.report`: the table, the verdict lines, JSON / CSV / PNG outputs.
"""

from keepersim.proposal.load import (
    EXTENSION_UPDATE_TYPE,
    PARAMS_UPDATE_TYPE,
    Proposal,
    ProposalError,
    compute_proposed_params,
    load_proposal,
    parse_proposal,
)

__all__ = [
    "EXTENSION_UPDATE_TYPE",
    "PARAMS_UPDATE_TYPE",
    "Proposal",
    "ProposalError",
    "compute_proposed_params",
    "load_proposal",
    "parse_proposal",
]

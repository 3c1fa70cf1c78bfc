"""``keepersim serve``: a chain node's REST API over a :class:`~keepersim.chain.Chain`.

One job per module: :mod:`.routes` (the route table), :mod:`.queries` and
:mod:`.keepersim_queries` (handlers), :mod:`.blocks` (posted blocks), :mod:`.app` (the Starlette
assembly); docs/server.md lists them all."""

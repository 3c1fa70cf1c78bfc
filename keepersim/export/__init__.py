"""Exporters' HTTP plumbing: JSON fetching with bounded retries (:mod:`.fetch`) and a
back-off gate shared by all worker threads (:mod:`.backoff`)."""

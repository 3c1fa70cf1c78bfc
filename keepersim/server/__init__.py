"""HTTP server side; :mod:`.cache` holds the single-flight, stale-while-refresh cache used to keep
expensive per-process computations from stampeding at expiry."""

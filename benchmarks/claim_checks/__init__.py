"""The recompute functions behind `benchmarks/claims.py`, one per row of the claims table
of `docs/results.md` (and one per headline of README.md's "Results")."""

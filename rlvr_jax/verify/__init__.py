"""Host-side verification: checks that turn a completion into a typed Verdict.

No JAX here: verifiers run in worker processes (`pool.py`) so a hung or crashing check is
killed and replaced without touching the trainer."""

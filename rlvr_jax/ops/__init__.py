"""Custom XLA calls for the few places where XLA's own code is measurably slow."""

"""Deterministic metrics: scores computed from the trajectory alone, no LLM (each an assertion
type a suite can list; `docs/assertions.md` gives every rule and formula)."""

"""Matching, pure: arguments, optimal pairing, JSON Schema checks, critics, patterns.

Nothing here calls the LLM: `strategy: judged` arguments are decided by the matcher the judged
layer lends while a suite scores (`arguments.judged_matcher`)."""

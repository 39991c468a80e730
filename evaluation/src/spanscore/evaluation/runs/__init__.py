"""Evaluation runs: a window of conversations in, scores in the lake, gates out (`run.evaluate`)."""

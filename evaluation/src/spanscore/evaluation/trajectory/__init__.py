"""Trajectories: each conversation rebuilt from its spans (the model, reading the lake,
assembling the rows)."""

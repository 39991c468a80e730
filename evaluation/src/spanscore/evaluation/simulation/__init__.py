"""Simulated users driving an agent before deployment (`spanscore simulate`)."""

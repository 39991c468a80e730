"""Runnable sample agents (installed as ``spanscore.examples``); the demo uses one."""

"""Judged metrics: rubrics, their prompts, the judged argument strategy, and the built-ins of
each source system (ArkSim, Dokimos, the tool-selection tester, agentevals)."""

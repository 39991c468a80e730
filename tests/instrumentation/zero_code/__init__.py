"""Agents that import nothing from spanscore, run by tests/instrumentation/test_zero_code.py under
`opentelemetry-instrument` (configured by environment variables only) and, for comparison,
under `explicit.py` (the one-line `spanscore.instrumentation.instrument()`). Each is a script:
`python <app>.py MODEL_URL CONVERSATION_ID [options]`. `shop` is what they share: the tools,
their data and the user turns."""

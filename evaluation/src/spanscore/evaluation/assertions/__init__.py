"""Scenario assertions over a trajectory's tool calls and answers (`tool_calls`, `forbidden`,
`order`, `goals`, `response`); each gives one graded `Score`. `docs/assertions.md` has every
rule and formula."""

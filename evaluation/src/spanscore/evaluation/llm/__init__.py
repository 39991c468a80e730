"""The LLM client any component uses: request and answer types, the HTTP transport, the client
with its adaptive limits and retries, and the pool with its cache and Batch API mode."""

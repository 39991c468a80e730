"""The MCP server (`spanscore mcp`), driven by the official SDK's client."""

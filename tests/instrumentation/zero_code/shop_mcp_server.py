"""The shop's tools as an MCP server over stdio: another process, as a tool server is (started
by `mcp_app.py` with MCP's default environment, so it runs uninstrumented)."""

import shop
from mcp.server.mcpserver import MCPServer

server = MCPServer("shop")
server.tool()(shop.get_order)
server.tool()(shop.search_products)

if __name__ == "__main__":
    server.run("stdio")

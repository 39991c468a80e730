"""The example agent's customer-service tools as an MCP server (the MCP SDK's own), for the
tests of the MCP shim and of an MCP server tracing its side of each call."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from spanscore.examples.customer_service.store import Store

SERVER = "customer-service"


def make_server(store: Store) -> MCPServer:
    server = MCPServer(SERVER)

    @server.tool()
    def get_order(order_id: str) -> dict[str, Any]:
        """Get order details by order ID"""
        return store.get_order(order_id)

    @server.tool()
    def search_products(query: str, max_price: float | None = None) -> list[dict[str, Any]]:
        """Search the product catalog by keyword and optional price filter"""
        return store.search_products(query, max_price)

    return server

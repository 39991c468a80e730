"""A customer-service agent over a small SQLite store: the demo's and the tests' example.

Tools: lookup_customer, get_order, search_products, cancel_order, send_verification_code,
verify_customer (the tools of ArkSim's tool-calling example).
"""

from .store import Store, ToolError

__all__ = ["Store", "ToolError"]

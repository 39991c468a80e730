"""The store behind the example agent's tools: customers, orders, products in SQLite."""

from __future__ import annotations

import sqlite3
from typing import Any

_SCHEMA = """
CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT, email TEXT UNIQUE);
CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id TEXT, item TEXT, total REAL, status TEXT);
CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT, price REAL, stock INTEGER);
CREATE TABLE codes (email TEXT PRIMARY KEY, code TEXT);
"""
_CUSTOMERS = [
    ("C-100", "Ada Lovelace", "ada@example.com"),
    ("C-101", "Grace Hopper", "grace@example.com"),
    ("C-102", "Alan Turing", "alan@example.com"),
]
_ORDERS = [
    ("ORD-1001", "C-100", "Mechanical keyboard", 89.0, "shipped"),
    ("ORD-1002", "C-100", "USB-C hub", 35.5, "processing"),
    ("ORD-1003", "C-101", "Noise-cancelling headphones", 199.0, "processing"),
    ("ORD-1004", "C-102", "Standing desk", 420.0, "delivered"),
]
_PRODUCTS = [
    ("SKU-1", "Wireless mouse", 25.0, 40),
    ("SKU-2", "Mechanical keyboard", 89.0, 12),
    ("SKU-3", "USB-C hub", 35.5, 0),
    ("SKU-4", "Laptop stand", 45.0, 7),
    ("SKU-5", "Webcam 1080p", 59.0, 3),
    ("SKU-6", "Noise-cancelling headphones", 199.0, 5),
]


class ToolError(Exception):
    """A tool failed in a way the agent sees (unknown order, wrong code, ...)."""


class Store:
    """The six tools, each a method taking JSON-able arguments and returning a JSON-able value."""

    def __init__(self, path: str = ":memory:") -> None:
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.executescript(_SCHEMA)
        self.db.executemany("INSERT INTO customers VALUES (?, ?, ?)", _CUSTOMERS)
        self.db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", _ORDERS)
        self.db.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", _PRODUCTS)
        self.verified: set[str] = set()

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        method = getattr(self, tool, None)
        if tool.startswith("_") or tool == "call" or not callable(method):
            raise ToolError(f"unknown tool {tool!r}")
        return method(**arguments)

    def lookup_customer(self, email: str) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT id, name, email FROM customers WHERE email = ?", (email.lower(),)
        ).fetchone()
        if row is None:
            raise ToolError(f"no customer with email {email}")
        return {"customer_id": row[0], "name": row[1], "email": row[2]}

    def get_order(self, order_id: str) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT id, customer_id, item, total, status FROM orders WHERE id = ?", (order_id,)
        ).fetchone()
        if row is None:
            raise ToolError(f"order {order_id} not found")
        keys = ("order_id", "customer_id", "item", "total", "status")
        return dict(zip(keys, row, strict=True))

    def search_products(self, query: str, max_price: float | None = None) -> list[dict[str, Any]]:
        sql = "SELECT sku, name, price, stock FROM products WHERE lower(name) LIKE ?"
        params: list[Any] = [f"%{query.lower()}%"]
        if max_price is not None:
            sql += " AND price <= ?"
            params.append(max_price)
        rows = self.db.execute(sql + " ORDER BY price", params).fetchall()
        return [{"sku": r[0], "name": r[1], "price": r[2], "in_stock": r[3] > 0} for r in rows]

    def send_verification_code(self, email: str) -> dict[str, Any]:
        self.lookup_customer(email)
        code = "4" + str(sum(map(ord, email)) % 100000).zfill(5)
        self.db.execute("INSERT OR REPLACE INTO codes VALUES (?, ?)", (email.lower(), code))
        return {"sent": True, "email": email}

    def verify_customer(self, email: str, code: str) -> dict[str, Any]:
        row = self.db.execute("SELECT code FROM codes WHERE email = ?", (email.lower(),)).fetchone()
        if row is None or row[0] != code:
            raise ToolError("verification code does not match")
        self.verified.add(email.lower())
        return {"verified": True}

    def expected_code(self, email: str) -> str:
        """What the customer reads in their inbox (the scripted user knows it)."""
        return "4" + str(sum(map(ord, email)) % 100000).zfill(5)

    def cancel_order(self, order_id: str, confirm: bool = False) -> dict[str, Any]:
        order = self.get_order(order_id)
        if not confirm:
            raise ToolError("cancellation needs confirm=true")
        if order["status"] != "processing":
            raise ToolError(f"order {order_id} is {order['status']} and cannot be cancelled")
        self.db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (order_id,))
        return {"order_id": order_id, "status": "cancelled"}

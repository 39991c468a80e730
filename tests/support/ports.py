"""Free loopback ports, for a child process that must be told its port in advance.

In-process servers bind port 0 and report the port they got; a child process (`spanscore
serve`, moto, a proxy) cannot tell its parent, so it is given a port that was free a moment
ago. Another process may take it in between: rare on loopback, and the start fails clearly.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on when this was called."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

"""Loopback ports for the services the tests start, and their JSON replies."""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object,
              headers: dict[str, str] | None = None) -> None:
    """A JSON reply from a stand-in server's handler, with its length (clients of Google's
    and Kubernetes' APIs read the body by Content-Length)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)

"""A minimal SMTP server on loopback that accepts every message, standing in for a mail
relay: the replies a client needs for one authenticated message, as RFC 5321 defines them
(4.2: 220 greeting, 250 to EHLO/HELO, MAIL, RCPT and the end of DATA, 354 to DATA, 221 to
QUIT; 4.1.1.4: the message ends with a line holding one ".", 4.5.2: a leading dot doubled)
and RFC 4954 for AUTH (the EHLO keyword ``AUTH`` with its mechanisms, 235 on success). No
TLS: the client is told to send in the clear (Apprise's ``mailto://...?secure=no``,
apprise/plugins/email/base.py). It records the AUTH line and each message's text."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Mailbox:
    host: str
    port: int
    auth: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@contextlib.contextmanager
def smtp_server() -> Iterator[Mailbox]:
    box: Mailbox | None = None

    class Handler(socketserver.StreamRequestHandler):
        def _reply(self, text: str) -> None:
            self.wfile.write((text + "\r\n").encode())

        def handle(self) -> None:
            assert box is not None
            self._reply("220 localhost ESMTP tpurl-test")
            data: list[str] | None = None
            for raw in self.rfile:
                line = raw.decode(errors="replace").rstrip("\r\n")
                if data is not None:
                    if line == ".":
                        box.messages.append("\n".join(data))
                        data = None
                        self._reply("250 2.0.0 queued")
                    else:
                        data.append(line[1:] if line.startswith("..") else line)
                    continue
                verb = line.split(" ", 1)[0].upper()
                if verb == "EHLO":
                    self._reply("250-localhost")
                    self._reply("250 AUTH PLAIN LOGIN")
                elif verb == "AUTH":
                    box.auth.append(line)
                    self._reply("235 2.7.0 Authentication successful")
                elif verb == "DATA":
                    data = []
                    self._reply("354 End data with <CR><LF>.<CR><LF>")
                elif verb == "QUIT":
                    self._reply("221 2.0.0 Bye")
                    return
                else:  # HELO, MAIL, RCPT, RSET, NOOP
                    self._reply("250 2.0.0 OK")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box = Mailbox("127.0.0.1", int(server.server_address[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield box
    finally:
        server.shutdown()
        server.server_close()

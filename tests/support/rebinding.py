"""A DNS-rebinding attack on loopback, for a real browser.

The attacker owns a name (``rebind.test``) and serves a page from it; once the page has loaded, the name is
rebound to 127.0.0.1, so the page's script reaches a listener on the operator's machine *same-origin*, with the
attacker's name in ``Host``. Chromium's ``--host-resolver-rules`` pins the name to 127.0.0.1 (no DNS server
needed) and :class:`RebindingProxy` plays both resolutions on one port: ``GET /attack`` is the attacker's server
answering with its page, every other request is the listener behind the rebound name (the bytes go to it
unchanged, ``Host`` included).

    with RebindingProxy(target_port, page_html) as proxy:
        driver = headless chromium with ("--host-resolver-rules=" + proxy.resolver_rule)
        driver.get(proxy.page_url)
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

NAME = "rebind.test"
PAGE_PATH = "/attack"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class RebindingProxy:
    """``http://rebind.test:<port>/attack`` is the attacker's page; any other path reaches ``target_port``."""

    def __init__(self, target_port: int, page_html: str) -> None:
        self.target_port = target_port
        self.page = page_html.encode()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.forwarded: list[bytes] = []  # the request heads handed to the listener, as the browser sent them
        self._thread = threading.Thread(target=self._serve, name="rebinding-proxy", daemon=True)

    @property
    def resolver_rule(self) -> str:
        return f"MAP {NAME} 127.0.0.1"

    @property
    def page_url(self) -> str:
        return f"http://{NAME}:{self.port}{PAGE_PATH}"

    def __enter__(self) -> RebindingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            head += chunk
        request_line = head.split(b"\r\n", 1)[0].split()
        if len(request_line) >= 2 and request_line[1] == PAGE_PATH.encode():
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n"
                b"Connection: close\r\nContent-Length: " + str(len(self.page)).encode() + b"\r\n\r\n" + self.page
            )
            conn.close()
            return
        self.forwarded.append(head.split(b"\r\n\r\n", 1)[0])
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        upstream.sendall(head)
        threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()
        _pipe(conn, upstream)

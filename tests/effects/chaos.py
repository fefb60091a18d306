"""A TCP proxy that cuts connections on cue: real sockets, real resets.

Each accepted connection takes the next mode from the queue (``pass`` when empty):

- ``pass`` — bytes both ways until either side closes;
- ``drop_before`` — read the request, then reset the client's connection without ever
  connecting to the provider: the provider never sees it;
- ``hold_before`` — as ``drop_before``, but the request is held (``arrived`` set)
  until ``release`` is set, then the connection is reset;
- ``drop_after`` — forward the request, wait for the first byte of the provider's
  answer (it answers only after committing), then reset the client's connection
  without forwarding it: the effect happened, the answer is lost.

A reset is a close with ``SO_LINGER`` 0 (an RST), what a dead middlebox or a crashed
peer looks like.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "drop_before", "drop_after", "hold_before"]


class CutProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.modes: queue.Queue[Mode] = queue.Queue()
        self.cuts: list[Mode] = []  # the cuts made, in order
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def next(self, *modes: Mode) -> None:
        for mode in modes:
            self.modes.put(mode)

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            socket.create_connection(self.listener.getsockname(), timeout=1).close()
        self._thread.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            if self._closing:
                client.close()
                return
            try:
                mode = self.modes.get_nowait()
            except queue.Empty:
                mode = "pass"
            threading.Thread(target=self._serve, args=(client, mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: Mode) -> None:
        if mode in ("drop_before", "hold_before"):
            client.recv(65536)  # the request left the caller...
            if mode == "hold_before":
                self.arrived.set()
                self.release.wait()
            self.cuts.append(mode)
            _reset(client)  # ...and dies here
            return
        upstream = socket.create_connection(self.upstream)
        if mode == "pass":
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
            _pump(client, upstream)
            return
        # One thread holds the client's socket, so that the reset below is sent now
        # (a socket another thread is blocked reading is not closed until it returns).
        upstream.sendall(_read_request(client))
        first = upstream.recv(1)  # the provider answers only once it committed
        if first:
            self.cuts.append(mode)
        _reset(client)
        _reset(upstream)


def _read_request(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 request (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass

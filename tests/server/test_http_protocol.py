"""The serving protocol writes a small response in one write: the head held back until
its body, or the end of the loop's turn. Against the transport written directly (the
reference), the bytes on the wire are the same, in the same order, and nothing is
held past the turn that wrote it; a close sends what is held, an abort drops it."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.server.http_protocol import HOLD_LIMIT, CoalescingProtocol, CoalescingTransport


class FakeTransport:
    """Records the writes it is given; closing and aborting as a transport does."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.eof = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        assert not self.closing, "a write after close"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def write_eof(self) -> None:
        self.eof = True

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)

    @property
    def wire(self) -> bytes:
        return b"".join(self.writes)


async def _turn() -> None:
    await asyncio.sleep(0)


async def test_a_head_and_its_body_in_one_turn_are_one_write() -> None:
    real = FakeTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert real.writes == []  # held
    transport.write(b"{}")
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await _turn()
    assert len(real.writes) == 1


async def test_a_lone_write_goes_out_at_the_end_of_its_turn() -> None:
    real = FakeTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    assert transport.get_write_buffer_size() > 0
    await _turn()  # a long-poll's head, say: not held for its body
    assert real.wire == b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    assert transport.get_write_buffer_size() == 0


async def test_a_large_write_is_not_held_and_follows_what_is() -> None:
    real = FakeTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    big = b"x" * (HOLD_LIMIT + 1)
    transport.write(big)
    assert real.writes == [big]


async def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    real = FakeTransport()
    transport = CoalescingTransport(real, loop)  # type: ignore[arg-type]
    transport.write(b"head")
    transport.close()
    assert real.wire == b"head" and real.closing
    await _turn()  # the turn's flush finds nothing: no write after the close
    assert real.writes == [b"head"]
    other = FakeTransport()
    aborted = CoalescingTransport(other, loop)  # type: ignore[arg-type]
    aborted.write(b"head")
    aborted.abort()
    await _turn()
    assert other.writes == []


async def test_a_protocol_switch_and_write_eof_send_what_is_held_first() -> None:
    loop = asyncio.get_running_loop()
    real = FakeTransport()
    transport = CoalescingTransport(real, loop)  # type: ignore[arg-type]
    transport.write(b"101 head")
    transport.set_protocol("websocket")  # type: ignore[arg-type]
    assert real.wire == b"101 head" and real.protocol == "websocket"
    transport.write(b"last")
    transport.write_eof()
    assert real.wire == b"101 headlast" and real.eof
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest: forwarded


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(max_size=64)),
        st.tuples(st.just("write"), st.integers(HOLD_LIMIT - 2, HOLD_LIMIT + 2)),
        st.tuples(st.just("turn"), st.none()),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, ending=st.sampled_from(["close", "turn", "abort"]))
def test_the_wire_is_what_direct_writes_give(ops: list[tuple[str, Any]], ending: str) -> None:
    """Reference: every write straight to the transport. Same bytes, same order; at
    the end of every turn nothing is held; never more writes than the reference."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        direct, real = FakeTransport(), FakeTransport()
        transport = CoalescingTransport(real, loop)  # type: ignore[arg-type]
        for op, arg in ops:
            if op == "write":
                data = arg if isinstance(arg, bytes) else b"y" * arg
                direct.write(data)
                transport.write(data)
            else:
                await _turn()
                assert real.wire == direct.wire
                assert transport.get_write_buffer_size() == 0
        if ending == "abort":  # what was held is dropped, as the transport's buffer is
            transport.abort()
            await _turn()
            assert direct.wire.startswith(real.wire)
            return
        if ending == "close":
            transport.close()
        await _turn()
        assert real.wire == direct.wire
        assert len(real.writes) <= len(direct.writes)

    asyncio.run(run())


# -- under uvicorn -------------------------------------------------------------------------


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b'{"verdict":"allow"}'
    if scope["path"] == "/stream":  # a head, then the body in later turns
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two"):
            await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", b"19")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def served() -> Any:
    writes: list[int] = []
    real_write = CoalescingTransport.write

    def counting(self: CoalescingTransport, data: Any) -> None:
        before = self._held
        real_write(self, data)
        if before is not None or self._held is None:
            writes.append(len(data))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, http=CoalescingProtocol, log_level="warning",
        lifespan="off",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    CoalescingTransport.write = counting  # type: ignore[method-assign]
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{port}", writes
    finally:
        server.should_exit = True
        thread.join(10)
        CoalescingTransport.write = real_write  # type: ignore[method-assign]


def test_under_uvicorn_a_response_is_one_write_and_a_stream_still_streams(served: Any) -> None:
    url, writes = served
    with httpx.Client(base_url=url) as client:
        for _ in range(3):  # keep-alive: each response whole, in one write
            answer = client.post("/v1/check", content=b"{}")
            assert answer.status_code == 200 and answer.json() == {"verdict": "allow"}
        assert len(writes) == 3
        with client.stream("GET", "/stream") as streamed:
            assert streamed.status_code == 200  # the head came before the body's turns
            assert b"".join(streamed.iter_bytes()) == b"one,two"

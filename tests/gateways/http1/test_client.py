"""The lean HTTP/1.1 client against a real socket that misbehaves on purpose: each
adversarial answer next to the benign one it resembles."""

from __future__ import annotations

import asyncio
import socket

import pytest

from interlock.gateways.http1 import (
    ConnectError,
    Http1Client,
    Limits,
    PoolTimeout,
    ReadTimeout,
    RemoteProtocolError,
    ResponseTooLarge,
    Target,
    Timeouts,
    UpstreamError,
)

from .scripted import Request, Scripted, answer

JSON = [("content-type", "application/json")]


def keep_answering(body: bytes = b"ok", *headers: str):  # type: ignore[no-untyped-def]
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(body, 200, *headers))
        await writer.drain()
        return True

    return script


def pool_of(client: Http1Client, server: Scripted):  # type: ignore[no-untyped-def]
    return client._pools[("http", "127.0.0.1", server.port)]


# -- the ordinary exchange -----------------------------------------------------------------


async def test_a_post_is_framed_and_its_answer_read_whole() -> None:
    async with Scripted(keep_answering(b'{"ok": true}')) as server, Http1Client() as client:
        headers = [*JSON, ("authorization", "Bearer sk-x")]
        answer_ = await client.send("POST", Target.of(server.url()), headers, b'{"a": 1}')
        assert answer_.status_code == 200
        assert await answer_.aread() == b'{"ok": true}'
    (seen,) = server.requests
    assert (seen.method, seen.path, seen.body) == ("POST", "/v1/x", b'{"a": 1}')
    assert seen.headers["host"] == f"127.0.0.1:{server.port}"
    assert seen.headers["content-length"] == "8"
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["authorization"] == "Bearer sk-x"


async def test_a_keep_alive_connection_carries_the_next_request() -> None:
    async with Scripted(keep_answering()) as server, Http1Client() as client:
        for _ in range(3):
            answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
            assert await answer_.aread() == b"ok"
        assert pool_of(client, server).total == 1
    assert server.connections == 1
    assert len(server.requests) == 3


async def test_a_chunked_stream_is_yielded_as_it_comes() -> None:
    """The second chunk is written only after the client has read the first."""
    first_read = asyncio.Event()

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"6\r\ndata: \r\n")
        await writer.drain()
        await first_read.wait()
        writer.write(b"3\r\none\r\n0\r\n\r\n")
        await writer.drain()
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        chunks = []
        async for chunk in answer_.aiter_bytes():
            chunks.append(chunk)
            first_read.set()
        assert b"".join(chunks) == b"data: one"
        assert len(chunks) == 2
        # read to its end: the connection went back to the pool
        assert len(pool_of(client, server).idle) == 1


async def test_lines_split_on_every_sse_line_ending_even_across_chunks() -> None:
    pieces = [b"data: a\r", b"\ndata: b\rdata: c\n", b"\ndata: \xc3", b"\xa9\r\n\r\n", b"tail"]

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in pieces:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        lines = [line async for line in answer_.aiter_lines()]
    assert lines == ["data: a", "data: b", "data: c", "", "data: é", "", "tail"]


async def test_a_body_delimited_by_the_close_is_read_to_the_close() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()
        return False

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await answer_.aread() == b"all of it"
        assert pool_of(client, server).idle == []  # never reused
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await answer_.aread() == b"all of it"
    assert server.connections == 2


async def test_an_interim_answer_is_skipped_for_the_final_one() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n")
        writer.write(answer(b"final", 200, "x-final: yes"))
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert answer_.status_code == 200
        assert answer_.headers.get("x-final") == "yes"
        assert "link" not in answer_.headers
        assert await answer_.aread() == b"final"


async def test_an_error_status_is_an_answer_and_keeps_the_connection() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        status = 500 if len(server.requests) == 1 else 200
        writer.write(answer(b"nope" if status == 500 else b"ok", status))
        return True

    async with Scripted(script) as server, Http1Client() as client:
        failed = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert (failed.status_code, await failed.aread()) == (500, b"nope")
        ok = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await ok.aread() == b"ok"
    assert server.connections == 1  # reused after an error answer read to its end


# -- an upstream that breaks HTTP ---------------------------------------------------------


async def test_an_upstream_closing_mid_stream_is_an_error_and_the_connection_is_gone() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            return False  # closed before the last chunk
        writer.write(answer())
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        received = []
        with pytest.raises(RemoteProtocolError, match="before the response was complete"):
            async for chunk in answer_.aiter_bytes():
                received.append(chunk)
        assert received == [b"hello"]
        assert pool_of(client, server).total == 0
        again = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await again.aread() == b"ok"
    assert server.connections == 2


async def test_a_body_shorter_than_its_content_length_is_an_error() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
        await writer.drain()
        return False

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        with pytest.raises(RemoteProtocolError):
            await answer_.aread()


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
    ],
    ids=[
        "chunk size not hex",
        "chunk longer than its size",
        "content-length and chunked",
        "two content-lengths",
        "status not a number",
        "not HTTP",
        "header without a colon",
        "protocol switch",
    ],
)
async def test_a_malformed_answer_is_a_protocol_error_never_a_body(raw: bytes) -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        await writer.drain()
        await asyncio.sleep(3600)  # hold the connection open: the client must end it
        return False

    async with Scripted(script) as server, Http1Client() as client:
        with pytest.raises(RemoteProtocolError):
            answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
            await answer_.aread()
        assert pool_of(client, server).total == 0


async def test_a_well_formed_chunked_answer_beside_the_malformed_ones() -> None:
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await answer_.aread() == b"hello"


@pytest.mark.parametrize("size", [10_000, 70_000])
async def test_a_head_over_the_cap_is_refused_and_one_under_it_passes(size: int) -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b"ok", 200, "x-big: " + "a" * size))
        await writer.drain()
        return True

    limits = Limits(max_head=64 * 1024)
    async with Scripted(script) as server, Http1Client(limits=limits) as client:
        if size > limits.max_head:
            with pytest.raises(ResponseTooLarge):
                await client.send("POST", Target.of(server.url()), JSON, b"{}")
        else:
            answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
            assert len(answer_.headers["x-big"]) == size


async def test_a_header_that_never_ends_is_refused_at_the_cap() -> None:
    """A header line dribbled in forever never completes: the bytes fed are capped."""

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nx-endless: ")
        while True:
            writer.write(b"a" * 4096)
            await writer.drain()

    limits = Limits(max_head=32 * 1024)
    async with Scripted(script) as server, Http1Client(limits=limits) as client:
        with pytest.raises(ResponseTooLarge):
            await client.send("POST", Target.of(server.url()), JSON, b"{}")


async def test_many_headers_over_the_cap_are_refused() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b"ok", 200, *(f"x-h{i}: v" for i in range(10_000))))
        return True

    async with (
        Scripted(script) as server,
        Http1Client(limits=Limits(max_head=16 * 1024)) as client,
    ):
        with pytest.raises(ResponseTooLarge):
            await client.send("POST", Target.of(server.url()), JSON, b"{}")


async def test_a_body_read_whole_over_its_cap_is_refused() -> None:
    async with (
        Scripted(keep_answering(b"x" * 5000)) as server,
        Http1Client(limits=Limits(max_body=4096)) as client,
    ):
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        with pytest.raises(ResponseTooLarge):
            await answer_.aread()
        assert answer_.is_closed


async def test_an_encoded_answer_the_client_did_not_ask_for_is_refused() -> None:
    async with (
        Scripted(keep_answering(b"\x1f\x8b...", "content-encoding: gzip")) as server,
        Http1Client() as client,
    ):
        with pytest.raises(RemoteProtocolError, match="gzip"):
            await client.send("POST", Target.of(server.url()), JSON, b"{}")


async def test_a_second_answer_to_one_request_discards_the_connection() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b"one") + answer(b"two"))
        return True

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await answer_.aread() == b"one"
        again = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await again.aread() == b"one"  # on a new connection
    assert server.connections == 2


# -- time ----------------------------------------------------------------------------------


async def test_an_upstream_that_never_answers_times_out() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return False

    timeouts = Timeouts(read=0.2)
    async with Scripted(script) as server, Http1Client(timeouts=timeouts) as client:
        with pytest.raises(ReadTimeout):
            await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert pool_of(client, server).total == 0
    assert len(server.requests) == 1  # a POST is never sent again


async def test_a_stream_that_stalls_mid_body_times_out_and_is_not_reused() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            await asyncio.sleep(3600)
        writer.write(answer())
        return True

    timeouts = Timeouts(read=0.2)
    async with Scripted(script) as server, Http1Client(timeouts=timeouts) as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        with pytest.raises(ReadTimeout):
            async for _ in answer_.aiter_bytes():
                pass
        again = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await again.aread() == b"ok"
    assert server.connections == 2


async def test_a_full_pool_makes_the_next_request_wait_then_time_out() -> None:
    async with (
        Scripted(keep_answering()) as server,
        Http1Client(limits=Limits(max_connections=1), timeouts=Timeouts(pool=0.2)) as client,
    ):
        held = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        with pytest.raises(PoolTimeout):
            await client.send("POST", Target.of(server.url()), JSON, b"{}")
        waiting = asyncio.create_task(client.send("POST", Target.of(server.url()), JSON, b"{}"))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert await held.aread() == b"ok"  # read to its end: the connection is free
        assert await (await waiting).aread() == b"ok"
    assert server.connections == 1


async def test_a_cancelled_request_closes_its_connection() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return False

    async with Scripted(script) as server, Http1Client() as client:
        task = asyncio.create_task(client.send("POST", Target.of(server.url()), JSON, b"{}"))
        while not server.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool_of(client, server).total == 0


async def test_a_response_left_unread_closes_its_connection() -> None:
    async with Scripted(keep_answering(b"x" * 100)) as server, Http1Client() as client:
        async with await client.send("POST", Target.of(server.url()), JSON, b"{}"):
            pass  # not read
        assert pool_of(client, server).total == 0
        await server.closed.wait()  # the server saw the connection end


# -- reuse and retries ---------------------------------------------------------------------


async def test_a_pooled_connection_the_upstream_closed_is_not_used() -> None:
    """The upstream closes an idle connection (as servers do after their keep-alive
    timeout): the next request goes on a new one, and is sent once."""

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer())
        await writer.drain()
        return False  # closed after answering, though the answer did not say so

    async with Scripted(script) as server, Http1Client() as client:
        answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await answer_.aread() == b"ok"
        while pool_of(client, server).idle:  # its close is seen by the event loop
            await asyncio.sleep(0.01)
        again = await client.send("POST", Target.of(server.url()), JSON, b"{}")
        assert await again.aread() == b"ok"
    assert [r.connection for r in server.requests] == [0, 1]


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_a_request_whose_connection_closed_unanswered_is_resent_only_if_safe(
    method: str,
) -> None:
    """The reused connection takes the second request and closes without a byte: a
    POST may have been acted on, so it is not sent again; a GET is, once, on a new
    connection."""

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        if request.connection == 0 and len(server.requests) == 2:
            return False  # read, then closed unanswered
        writer.write(answer())
        await writer.drain()
        return True

    async with Scripted(script) as server, Http1Client() as client:
        first = await client.send(method, Target.of(server.url()), JSON, b"")
        assert await first.aread() == b"ok"
        if method == "POST":
            with pytest.raises(RemoteProtocolError, match="without answering") as caught:
                await client.send(method, Target.of(server.url()), JSON, b"")
            assert caught.value.sent
        else:
            again = await client.send(method, Target.of(server.url()), JSON, b"")
            assert await again.aread() == b"ok"
    expected = [0, 0] if method == "POST" else [0, 0, 1]
    assert [r.connection for r in server.requests] == expected


async def test_a_server_keep_alive_timeout_is_believed() -> None:
    """``Keep-Alive: timeout=1``: kept less than a second, so not kept at all here."""
    async with (
        Scripted(keep_answering(b"ok", "keep-alive: timeout=1")) as server,
        Http1Client() as client,
    ):
        for _ in range(2):
            answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
            assert await answer_.aread() == b"ok"
    assert server.connections == 2


async def test_a_connection_close_answer_is_not_reused() -> None:
    async with (
        Scripted(keep_answering(b"ok", "connection: close")) as server,
        Http1Client() as client,
    ):
        for _ in range(2):
            answer_ = await client.send("POST", Target.of(server.url()), JSON, b"{}")
            assert await answer_.aread() == b"ok"
    assert server.connections == 2


# -- what the client refuses to send -----------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        ("x-note", "a\r\nx-injected: 1"),
        ("x-note", "a\nb"),
        ("x-note", "a\0b"),
        ("x note", "a"),
        ("content-length", "0"),
        ("transfer-encoding", "chunked"),
        ("host", "elsewhere"),
    ],
)
async def test_a_header_that_would_not_be_one_header_is_refused_unsent(
    header: tuple[str, str],
) -> None:
    async with Scripted(keep_answering()) as server, Http1Client() as client:
        with pytest.raises(ValueError):
            await client.send("POST", Target.of(server.url()), [header], b"{}")
        benign = await client.send("POST", Target.of(server.url()), [("x-note", "a b")], b"{}")
        assert await benign.aread() == b"ok"
    assert len(server.requests) == 1


async def test_an_unreachable_upstream_is_a_connect_error_never_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Http1Client() as client:
        with pytest.raises(ConnectError) as caught:
            await client.send("POST", Target.of(f"http://127.0.0.1:{port}/v1"), JSON, b"{}")
    assert not caught.value.sent
    assert isinstance(caught.value, UpstreamError)


def test_a_target_is_parsed_once_and_refuses_what_it_cannot_send() -> None:
    target = Target.of("https://api.example.test/v1/chat/completions?x=1")
    assert (target.scheme, target.host, target.port) == ("https", "api.example.test", 443)
    assert target.path == "/v1/chat/completions?x=1"
    assert target.host_header == b"api.example.test"
    assert Target.of("http://[::1]:8080/").host_header == b"[::1]:8080"
    for bad in ("ftp://x/", "http:///nohost", "http://user:pw@x/", "http://x/a b"):
        with pytest.raises(ValueError):
            Target.of(bad)

"""The stdio client side: what is sent reaches the client whole and in order — small
lines written at once into a pipe with room, others (and everything while anything is
queued) through the writer thread — and a full pipe never blocks the sender."""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time

from interlock.gateways.mcp.clientio import StdioClient


def lines_of(sizes: list[int]) -> list[bytes]:
    return [
        (f"{n:06d}:" + "x" * max(0, size - 8)).encode()[: max(size - 1, 7)] + b"\n"
        for n, size in enumerate(sizes)
    ]


def read_all(fd: int, into: bytearray, stop: threading.Event, slow: float = 0.0) -> None:
    while True:
        if slow:
            time.sleep(slow)
        chunk = os.read(fd, 65536)
        if not chunk:
            stop.set()
            return
        into.extend(chunk)


async def send_all(lines: list[bytes], out_fd: int) -> StdioClient:
    with os.fdopen(os.dup(out_fd), "wb") as out:
        client = StdioClient(open(os.devnull, "rb"), out, max_message_bytes=1 << 26)  # noqa: SIM115
        client.start()
        for line in lines:
            client.send(line)
            await asyncio.sleep(0)
        await client.close()
    return client


def run(lines: list[bytes], slow: float = 0.0) -> bytes:
    read_fd, write_fd = os.pipe()
    received = bytearray()
    done = threading.Event()
    reader = threading.Thread(target=read_all, args=(read_fd, received, done, slow))
    reader.start()
    asyncio.run(send_all(lines, write_fd))
    os.close(write_fd)
    reader.join(timeout=60)
    os.close(read_fd)
    assert done.is_set()
    return bytes(received)


def test_small_and_large_lines_arrive_whole_and_in_order() -> None:
    sizes = [40, 90, select.PIPE_BUF, select.PIPE_BUF + 1, 300_000, 12, 70_000, 8, 4000] * 20
    lines = lines_of(sizes)
    assert run(lines) == b"".join(lines)


def test_a_slow_client_keeps_the_order_and_never_blocks_the_sender() -> None:
    # the pipe fills (64 KiB) while the reader sleeps: later small lines must queue
    # behind the ones waiting, not jump ahead into the room the reader frees
    sizes = [3000, 50, 3000, 60_000, 20, 20, 4096, 10] * 30
    lines = lines_of(sizes)
    started = time.monotonic()
    assert run(lines, slow=0.002) == b"".join(lines)
    assert time.monotonic() - started < 60  # a bound on a hang, not a speed check


def test_a_small_line_into_a_pipe_with_room_skips_the_thread() -> None:
    read_fd, write_fd = os.pipe()

    async def one() -> int:
        with os.fdopen(os.dup(write_fd), "wb") as out:
            client = StdioClient(open(os.devnull, "rb"), out, max_message_bytes=1024)  # noqa: SIM115
            client.start()
            client.send(b'{"jsonrpc":"2.0","id":1,"result":{}}\n')
            queued = client._to_client.qsize()
            await client.close()
            return queued

    try:
        assert asyncio.run(one()) == 0
        assert os.read(read_fd, 100) == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    finally:
        os.close(read_fd)
        os.close(write_fd)

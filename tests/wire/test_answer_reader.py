"""AnswerReader: frames read into reused buffers, never into one an earlier answer still lives in."""

from __future__ import annotations

import asyncio

import pytest

from ferry.wire.answer_reader import AnswerReader


def _feed(reader: AnswerReader, data: bytes, step: int) -> None:
    """What the transport does: recv_into the protocol's buffer, ``step`` bytes at a time at most."""
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        n = min(len(buf), step, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        del buf
        reader.buffer_updated(n)
        pos += n


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("step", [1, 3, 7, 1 << 20])
def test_frames_whatever_the_reads_bring(step: int) -> None:
    async def run() -> list[bytes]:
        reader = AnswerReader(1 << 20)
        _feed(reader, _frame(b"a" * 100) + _frame(b"bcde") + _frame(b"e" * 1000), step)
        return [bytes(await reader.read()) for _ in range(3)]

    assert asyncio.run(run()) == [b"a" * 100, b"bcde", b"e" * 1000]


def test_a_buffer_is_reused_only_once_its_answer_is_gone() -> None:
    async def run() -> None:
        reader = AnswerReader(1 << 20)
        _feed(reader, _frame(b"1" * 5000), 1 << 20)
        first = await reader.read()
        first_buffer = id(first.obj)
        held = first[4:10]  # the caller keeps a slice of the first answer
        del first
        _feed(reader, _frame(b"2" * 4000), 1 << 20)
        second = await reader.read()
        assert bytes(held) == b"1" * 6 and bytes(second) == b"2" * 4000  # a buffer of its own
        second_obj = second.obj
        del held
        _feed(reader, _frame(b"3" * 3000), 1 << 20)
        third = await reader.read()
        assert bytes(second) == b"2" * 4000 and bytes(third) == b"3" * 3000
        assert id(third.obj) == first_buffer  # nothing refers to the first answer any more: its buffer again
        assert third.obj is not second_obj  # the second answer is still referred to
        del second, second_obj
        _feed(reader, _frame(b"4" * 4500), 1 << 20)
        fourth = await reader.read()
        assert bytes(third) == b"3" * 3000 and bytes(fourth) == b"4" * 4500
        assert len(fourth) == 4500  # a larger kept buffer, cut to the frame

    asyncio.run(run())


def test_a_size_prefix_out_of_range_fails_the_read() -> None:
    async def run() -> None:
        reader = AnswerReader(1000)
        _feed(reader, (5000).to_bytes(4, "big"), 4)
        with pytest.raises(ConnectionError, match="bad frame: response size 5000"):
            await reader.read()

    asyncio.run(run())

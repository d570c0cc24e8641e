"""Checked frames for a worker's result channel: garbage on it fails that worker, never the pool.

A frame is ``MAGIC | u64 length | u32 crc32 | pickle``. The reader treats a wrong magic, an absurd length,
a checksum mismatch or a payload that does not unpickle as the end of the channel (with the cause in
``FrameReader.corrupt``), so stray bytes a grader managed to write into the channel (or a frame they were
spliced into) cost the owner one worker restart, not a supervisor crash or a read that waits forever for a
length that was never meant.
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from typing import Any

MAGIC = b"RRLf"
_HEAD = struct.Struct("!4sQI")
MAX_FRAME_BYTES = 1 << 32
_READ_CHUNK = 1 << 20


def frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(MAGIC, len(data), zlib.crc32(data)) + data


class FrameReader:
    """Non-blocking reader: every complete frame in one go.

    One ``os.read`` per wake-up instead of a select plus two reads per message (``Connection.poll``/``recv``),
    which is most of the parent's cost per chunk of results.
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._buf = bytearray()
        self.corrupt: str | None = None  # why the channel was given up, if it carried garbage

    def read(self) -> tuple[list[Any], bool]:
        """The messages complete so far, and whether the channel ended: the writer closed its end (the
        worker exited or died) or it carried garbage (``corrupt`` says what; the worker must be replaced)."""
        eof = False
        while True:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self._buf += chunk
            if len(chunk) < _READ_CHUNK:
                break
        msgs: list[Any] = []
        buf, pos, head = self._buf, 0, _HEAD.size
        while len(buf) - pos >= head:
            magic, size, crc = _HEAD.unpack_from(buf, pos)
            if magic != MAGIC or size > MAX_FRAME_BYTES:
                self.corrupt = f"not a frame header: {bytes(buf[pos : pos + head])!r}"
                break
            if len(buf) - pos - head < size:
                break
            data = bytes(buf[pos + head : pos + head + size])
            pos += head + size
            if zlib.crc32(data) != crc:
                self.corrupt = f"checksum mismatch in a {size}-byte frame"
                break
            try:
                msgs.append(pickle.loads(data))
            except Exception as exc:  # any unpickling failure means the bytes are not what the worker sent
                self.corrupt = f"frame does not unpickle: {type(exc).__name__}: {exc}"
                break
        del buf[:pos]
        return msgs, eof or self.corrupt is not None

"""The bytes between the judge and its worker: length-prefixed frames on a socket, with deadlines.

Parent -> worker: a pickled request (the worker trusts the judge), then one raw frame per tensor.
Worker -> parent: a JSON header, then one raw frame per tensor the header announces. The parent
never unpickles what the worker sends: a header is JSON, a tensor is bytes the parent lays out
itself (`tensor_from`), checked against the dtype, shape and size the parent expects. Every read
of the parent has a deadline, so a worker that hangs mid-frame is a watchdog failure, not a hung
judge.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
import struct
import time
from typing import Any

import torch

HEADER = struct.Struct("<Q")
MAX_HEADER = 1 << 20  # a JSON header is small; a larger one is a hostile or broken worker
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}  # fmt: skip


class Timeout(Exception):
    """The other side did not finish a frame before the deadline."""


class Closed(Exception):
    """The other side closed the connection (the worker died, or the judge went away)."""


class Channel:
    """One end of the socket pair: frames out, frames in (with an optional deadline)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # ------------------------------------------------------------------ frames

    def send_frame(self, data: bytes | memoryview) -> None:
        self.sock.settimeout(None)
        self.sock.sendall(HEADER.pack(len(data)))
        if len(data):
            self.sock.sendall(data)

    def recv_frame(self, deadline: float | None = None, limit: int | None = None) -> bytearray:
        (n,) = HEADER.unpack(self._recv_exact(HEADER.size, deadline))
        if limit is not None and n > limit:
            raise ValueError(f"the worker sent a frame of {n} bytes where at most {limit} fit")
        return self._recv_exact(n, deadline)

    def _recv_exact(self, n: int, deadline: float | None) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout(f"no complete answer before the deadline ({got} of {n} bytes)")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                k = self.sock.recv_into(view[got:], min(n - got, 1 << 24))
            except TimeoutError:
                continue  # the loop re-checks the deadline
            except (ConnectionError, OSError) as exc:
                raise Closed(f"connection lost: {exc}") from exc
            if k == 0:
                raise Closed("the other side closed the connection")
            got += k
        return buf

    # ------------------------------------------------------------------ messages

    def send_request(self, msg: dict[str, Any], tensors: list[torch.Tensor] = ()) -> None:
        """Parent -> worker: the request, then each tensor's bytes (its dense copy)."""
        meta = [tensor_meta(t) for t in tensors]
        self.send_frame(pickle.dumps({**msg, "tensors": meta}))
        for t in tensors:
            self.send_frame(tensor_bytes(t))

    def recv_request(self) -> tuple[dict[str, Any], list[torch.Tensor]]:
        msg = pickle.loads(self.recv_frame())
        return msg, [tensor_from(m, self.recv_frame()) for m in msg.pop("tensors")]

    def send_reply(self, header: dict[str, Any], tensors: list[torch.Tensor] = ()) -> None:
        """Worker -> parent: a JSON header (tensor metadata under "tensors"), then the bytes."""
        meta = [tensor_meta(t) for t in tensors]
        self.send_frame(json.dumps({**header, "tensors": meta}).encode())
        for t in tensors:
            self.send_frame(tensor_bytes(t))

    def recv_reply(self, deadline: float | None, max_bytes: int
                   ) -> tuple[dict[str, Any], list[torch.Tensor]]:  # fmt: skip
        """The worker's answer; raises ValueError on anything malformed (never unpickles)."""
        raw = self.recv_frame(deadline, MAX_HEADER)
        try:
            header = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the worker's answer is not JSON: {exc}") from exc
        if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
            raise ValueError("the worker's answer is not a JSON object with a tensor list")
        metas = header.pop("tensors", [])
        total = 0
        out = []
        for m in metas:
            nbytes = expected_nbytes(m)
            total += nbytes
            if total > max_bytes:
                raise ValueError(f"the worker sent {total} bytes of tensors, at most "
                                 f"{max_bytes} expected")  # fmt: skip
            out.append(tensor_from(m, self.recv_frame(deadline, nbytes)))
        return header, out


def tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "device": t.device.type}  # fmt: skip


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """A dense row-major copy of t's elements, as bytes (bfloat16 included, via uint8)."""
    flat = t.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    flat = flat.contiguous()
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def expected_nbytes(m: Any) -> int:
    if not isinstance(m, dict) or m.get("dtype") not in DTYPES:
        raise ValueError(f"the worker announced a tensor of unknown type {m!r:.120}")
    shape = m.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise ValueError(f"the worker announced a bad shape {shape!r:.120}")
    n = 1
    for s in shape:
        n *= s
    return n * DTYPES[m["dtype"]].itemsize


def tensor_from(m: dict[str, Any], data: bytearray) -> torch.Tensor:
    """A new CPU tensor, private to the caller, holding `data` laid out as `m` says."""
    n = expected_nbytes(m)
    if len(data) != n:
        raise ValueError(f"tensor frame of {len(data)} bytes, {n} announced")
    dtype = DTYPES[m["dtype"]]
    if n == 0:
        return torch.empty(m["shape"], dtype=dtype)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(m["shape"])

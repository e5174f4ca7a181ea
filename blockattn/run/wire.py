"""The bytes between the judge and its worker: length-prefixed frames on a socket, with deadlines.

Parent -> worker: a pickled request (the worker trusts the judge), then the tensors' bytes.
Worker -> parent: a JSON header, then the bytes of each tensor the header announces. The parent
never unpickles what the worker sends: a header is JSON, a tensor is bytes the parent lays out
itself (`tensor_from`), checked against the dtype, shape and size the parent expects. Every read
of the parent has a deadline, so a worker that hangs mid-frame is a watchdog failure, not a hung
judge.

Tensor bytes travel as one raw frame each, or, from `SHM_MIN` bytes per message, in one memory
file (`memfd`) passed over the socket: ten times the socket's throughput, one copy per side. A
memory file holds that message's tensors and nothing else. The judge maps a worker's file only
once it is sealed against shrinking (a file cut short under the judge's reads would kill the
judge with SIGBUS). A file sealed against writing too (`F_SEAL_WRITE`: the kernel refuses every
write, shared writable mapping and hole punch, and refuses the seal while a writable mapping
exists) holds bytes nobody can change: the judge uses them in place, through a private mapping
(its own writes stay its own). Any other file is copied out into memory of the judge's own before
it is checked; a worker that writes on after answering changes nothing the judge holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import pickle
import socket
import stat
import struct
import time
from typing import Any

import numpy
import torch

HEADER = struct.Struct("<Q")
MAX_HEADER = 1 << 20  # a JSON header is small; a larger one is a hostile or broken worker
# From 64 KiB of tensors per message, one memory file instead of frames: what the socket carries
# then fits its buffer, so a judge sending the next case while the worker answers the last one
# never waits on a worker that is itself waiting to be read.
SHM_MIN = 1 << 16
ALIGN = 64
# What a memory file is sealed with: its bytes fixed (the judge reads them in place) and the
# seals themselves fixed.
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
MADV_POPULATE_READ = 22  # Linux 5.14: page tables filled read-only, copy-on-write unbroken
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
        self.header_at = 0.0
        self.send_deadline: float | None = None  # the judge's sends, too, end at a deadline

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # ------------------------------------------------------------------ frames

    @contextlib.contextmanager
    def _sending(self):
        """A send that ends at `send_deadline` (Timeout), or waits as long as it takes."""
        left = None if self.send_deadline is None else self.send_deadline - time.monotonic()
        try:
            if left is not None and left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            yield
        except TimeoutError:
            raise Timeout("the other side did not read a request before the deadline") from None

    def send_frame(self, data: bytes | memoryview) -> None:
        with self._sending():
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

    def _send_fd(self, fd: int) -> None:
        with self._sending():
            socket.send_fds(self.sock, [b"F"], [fd])

    def _recv_fd(self, deadline: float | None) -> int:
        """The memory file sent after a header (its one marker byte carries the descriptor)."""
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("no memory file before the deadline")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1, 4)
            except TimeoutError:
                continue
            except (ConnectionError, OSError) as exc:
                raise Closed(f"connection lost: {exc}") from exc
            if not data:
                for fd in fds:
                    os.close(fd)
                raise Closed("the other side closed the connection")
            if data != b"F" or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ValueError(f"expected one memory file, got {len(fds)} descriptor(s) "
                                 f"with {bytes(data)!r}")  # fmt: skip
            return fds[0]

    def _send_tensors(self, header: bytes, meta: list[dict[str, Any]],
                      tensors: list[torch.Tensor], shm: dict[str, Any] | None) -> None:  # fmt: skip
        self.send_frame(header)
        if shm is None:
            for t in tensors:
                self.send_frame(tensor_bytes(t))
            return
        fd = memfd_with(tensors, shm["offsets"], shm["size"])
        try:
            self._send_fd(fd)
        finally:
            os.close(fd)

    def send_request(self, msg: dict[str, Any], tensors: list[torch.Tensor] = ()) -> None:
        """Parent -> worker: the request, then each tensor's bytes (its dense copy)."""
        meta = [tensor_meta(t) for t in tensors]
        shm = layout(meta)
        self._send_tensors(pickle.dumps({**msg, "tensors": meta, "shm": shm}), meta,
                           list(tensors), shm)  # fmt: skip

    def recv_request(self) -> tuple[dict[str, Any], list[torch.Tensor]]:
        msg = pickle.loads(self.recv_frame())
        metas, shm = msg.pop("tensors"), msg.pop("shm", None)
        if shm is None:
            return msg, [tensor_from(m, self.recv_frame()) for m in metas]
        fd = self._recv_fd(None)
        try:  # the judge's file: its tensors are used in place (the mapping lives with them)
            return msg, tensors_in(fd, metas, shm, private=False)
        finally:
            os.close(fd)

    def send_reply(self, header: dict[str, Any], tensors: list[torch.Tensor] = ()) -> None:
        """Worker -> parent: a JSON header (tensor metadata under "tensors"), then the bytes."""
        meta = [tensor_meta(t) for t in tensors]
        shm = layout(meta)
        self._send_tensors(json.dumps({**header, "tensors": meta, "shm": shm}).encode(), meta,
                           list(tensors), shm)  # fmt: skip

    def recv_reply(self, deadline: float | None, max_bytes: int
                   ) -> tuple[dict[str, Any], list[torch.Tensor]]:  # fmt: skip
        """The worker's answer; raises ValueError on anything malformed (never unpickles)."""
        raw = self.recv_frame(deadline, MAX_HEADER)
        self.header_at = time.monotonic()  # the isolation's cost accounting splits here
        try:
            header = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the worker's answer is not JSON: {exc}") from exc
        if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
            raise ValueError("the worker's answer is not a JSON object with a tensor list")
        metas = header.pop("tensors", [])
        shm = header.pop("shm", None)
        total = 0
        for m in metas:
            total += expected_nbytes(m)
            if total > max_bytes:
                raise ValueError(f"the worker sent {total} bytes of tensors, at most "
                                 f"{max_bytes} expected")  # fmt: skip
        if shm is None:
            return header, [tensor_from(m, self.recv_frame(deadline, expected_nbytes(m)))
                            for m in metas]  # fmt: skip
        check_layout(shm, metas, max_bytes)
        fd = self._recv_fd(deadline)
        try:
            seals = check_sealed(fd, shm["size"])  # a write-sealed file: used in place
            return header, tensors_in(fd, metas, shm, private=not seals & fcntl.F_SEAL_WRITE)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------- memory files


def layout(metas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where each tensor sits in a message's memory file (None: small enough for frames)."""
    offsets, at = [], 0
    for m in metas:
        offsets.append(at)
        at += -(-expected_nbytes(m) // ALIGN) * ALIGN
    return {"offsets": offsets, "size": max(at, 1)} if at >= SHM_MIN else None


def check_layout(shm: Any, metas: list[dict[str, Any]], max_bytes: int) -> None:
    """A worker's announced layout: every tensor inside the file, the file not larger than the
    answer may be (ValueError naming what is wrong)."""
    if not isinstance(shm, dict) or not isinstance(shm.get("offsets"), list):
        raise ValueError(f"the worker announced a bad memory layout {shm!r:.120}")
    size, offsets = shm.get("size"), shm["offsets"]
    if not isinstance(size, int) or not 0 < size <= max_bytes + ALIGN * (len(metas) + 1):
        raise ValueError(f"the worker announced a memory file of {size!r:.40} bytes, at most "
                         f"{max_bytes} expected")  # fmt: skip
    if len(offsets) != len(metas):
        raise ValueError("the worker's memory layout does not match its tensor list")
    for off, m in zip(offsets, metas, strict=True):
        if not isinstance(off, int) or off < 0 or off + expected_nbytes(m) > size:
            raise ValueError(f"a tensor at offset {off!r:.40} lies outside the memory file")


def check_sealed(fd: int, size: int) -> int:
    """Refuse a descriptor the judge cannot read safely: not a memory file, shorter than
    announced, or one its sender could still shrink. Its seals."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("the worker sent a descriptor that is not a memory file")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        raise ValueError("the worker sent a file that is not a sealable memory file") from exc
    if not seals & fcntl.F_SEAL_SHRINK:
        raise ValueError("the worker's memory file is not sealed against shrinking (refused: "
                         "a file cut short under the judge's reads)")  # fmt: skip
    if st.st_size < size:
        raise ValueError(f"the worker's memory file holds {st.st_size} bytes, {size} announced")
    return seals


def memfd_with(tensors: list[torch.Tensor], offsets: list[int], size: int) -> int:
    """A sealed memory file holding the tensors' dense bytes at `offsets` (the caller closes)."""
    fd = os.memfd_create("blockattn-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            for t, off in zip(tensors, offsets, strict=True):
                n = t.numel() * t.element_size()
                if n:
                    dst = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off)
                    dst.view(t.dtype).view(t.shape).copy_(t.detach())
                    del dst
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def tensors_in(fd: int, metas: list[dict[str, Any]], shm: dict[str, Any],
               private: bool) -> list[torch.Tensor]:  # fmt: skip
    """The tensors a memory file holds: copied out into the caller's own memory (`private`:
    the judge, of a file its sender could still write), or views of a private copy-on-write
    mapping (the worker, of the judge's file; the judge, of a file sealed against writing)."""
    size = shm["size"]
    if private:
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                       mmap.PROT_READ)  # fmt: skip
    else:  # copy-on-write: the kernel may write its inputs (checked), never the judge's file
        mm = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
        with contextlib.suppress(OSError, ValueError):  # fault the pages in at once, read-only
            mm.madvise(MADV_POPULATE_READ)  # (a 1 GB answer: 250k faults)
    out = []
    try:
        for m, off in zip(metas, shm["offsets"], strict=True):
            n = expected_nbytes(m)
            dtype = DTYPES[m["dtype"]]
            if n == 0:
                out.append(torch.empty(m["shape"], dtype=dtype))
                continue
            if private:  # one copy out of the read-only mapping into memory of our own
                t = torch.empty(n, dtype=torch.uint8)
                src = numpy.frombuffer(mm, dtype=numpy.uint8, count=n, offset=off)
                t.numpy()[:] = src
                del src
            else:
                t = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off)
            out.append(t.view(dtype).reshape(m["shape"]))
    finally:
        if private:
            with contextlib.suppress(BufferError):
                mm.close()
    return out


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

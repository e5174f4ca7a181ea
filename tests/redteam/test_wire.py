"""The bytes between judge and worker (`blockattn.run.wire`): tensors come back exactly, by frames
and by memory file, and a worker that answers with a memory file the judge cannot read safely (one
it could still shrink under the judge's reads: SIGBUS in the judge; not a memory file; tensors
outside it) is refused by name. The "worker" here is this test, writing the socket by hand as a
kernel that rewrote its worker's module could.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import struct
import threading

import pytest
import torch

from blockattn.run import wire


def _pair() -> tuple[wire.Channel, socket.socket]:
    a, b = socket.socketpair()
    return wire.Channel(a), b


def _tensors(gen: torch.Generator) -> list[torch.Tensor]:
    big = torch.randn(300, 4, 64, generator=gen).to(torch.bfloat16)  # 150 KiB
    return [big, torch.randn(70_000, generator=gen), torch.empty(0, 3),
            torch.tensor(7, dtype=torch.int64), big[:, 1]]  # a strided view travels dense


@pytest.mark.parametrize("shm_min", [1 << 40, 1])
def test_round_trip_exact(monkeypatch: pytest.MonkeyPatch, shm_min: int) -> None:
    """Frames (shm_min huge) and one memory file (shm_min 1) both give bit-exact, private,
    dense tensors of the announced dtype and shape."""
    monkeypatch.setattr(wire, "SHM_MIN", shm_min)
    ts = _tensors(torch.Generator().manual_seed(11))
    judge, raw = _pair()
    worker = wire.Channel(raw)
    sender = threading.Thread(target=worker.send_reply, args=({"status": "ok"}, ts))
    sender.start()  # frames fill the socket's buffer: the judge reads meanwhile
    header, got = judge.recv_reply(None, 1 << 30)
    sender.join()
    assert header == {"status": "ok"}
    for t, g in zip(ts, got, strict=True):
        assert g.dtype == t.dtype and g.shape == t.shape and g.is_contiguous()
        assert torch.equal(g.view(-1).view(torch.uint8) if g.numel() else g,
                           t.contiguous().view(-1).view(torch.uint8) if t.numel() else t)
    sender = threading.Thread(target=judge.send_request, args=({"op": "x"}, ts))
    sender.start()
    msg, back = worker.recv_request()
    sender.join()
    assert msg["op"] == "x" and all(torch.equal(a, b) for a, b in zip(ts, back, strict=True))
    judge.close()
    worker.close()


def _announce(raw: socket.socket, header: dict) -> None:
    data = json.dumps(header).encode()
    raw.sendall(struct.pack("<Q", len(data)) + data)


def _memfd(nbytes: int, sealed: bool) -> int:
    fd = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, nbytes)
    with mmap.mmap(fd, nbytes) as mm:
        mm[:] = bytes(range(256)) * (nbytes // 256)
    if sealed:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


N = 1 << 20
META = [{"dtype": "float32", "shape": [N // 4], "device": "cpu"}]


def _answer_with(fd: int, shm: dict | None = None) -> tuple[wire.Channel, socket.socket]:
    judge, raw = _pair()
    _announce(raw, {"status": "ok", "tensors": META, "shm": shm or {"offsets": [0], "size": N}})
    socket.send_fds(raw, [b"F"], [fd])
    os.close(fd)
    return judge, raw


def test_sealed_file_is_read_and_copied_out() -> None:
    """The control: a sealed file is read, and what the judge holds is its own copy (the worker
    writing on afterwards changes nothing)."""
    fd = _memfd(N, sealed=True)
    keep = os.dup(fd)
    judge, raw = _answer_with(fd)
    _, (t,) = judge.recv_reply(None, N)
    first = t.clone()
    with mmap.mmap(keep, N) as mm:  # the worker writes on after answering
        mm[:8] = b"\xff" * 8
    os.close(keep)
    assert torch.equal(t.view(torch.int32), first.view(torch.int32))  # bitwise: NaNs inside
    raw.close()


def test_a_write_sealed_file_is_used_in_place_and_nobody_can_change_it() -> None:
    """A file sealed against writing (as every worker's answer is, `wire.memfd_with`) is not
    copied: its bytes are fixed. The worker cannot write them (a write, a shared writable mapping
    and a hole punch all fail), and what the judge writes into its tensors stays its own."""
    import ctypes
    import errno
    import fcntl

    want = torch.randn(N // 4, generator=torch.Generator().manual_seed(5))
    fd = wire.memfd_with([want], [0], N)
    keep = os.dup(fd)
    judge, raw = _answer_with(fd)
    _, (t,) = judge.recv_reply(None, N)
    assert torch.equal(t.view(torch.int32), want.view(torch.int32))
    with pytest.raises(PermissionError):
        mmap.mmap(keep, N)  # shared and writable: what the worker would write through
    with pytest.raises(PermissionError):
        os.pwrite(keep, b"\xff" * 8, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    punch = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE: zeroes what it punches
    assert libc.fallocate(keep, punch, ctypes.c_long(0), ctypes.c_long(N)) == -1
    assert ctypes.get_errno() == errno.EPERM
    assert fcntl.fcntl(keep, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SEAL  # no seal can be taken off
    t[:2] = float("nan")  # the judge's own writes: copy-on-write, the file keeps its bytes
    with mmap.mmap(keep, N, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
        assert mm[:8] == want[:2].numpy().tobytes()
    os.close(keep)
    raw.close()


def test_unsealed_file_is_refused() -> None:
    """A file the worker could shrink while the judge reads it (SIGBUS in the judge)."""
    judge, raw = _answer_with(_memfd(N, sealed=False))
    with pytest.raises(ValueError, match="not sealed against shrinking"):
        judge.recv_reply(None, N)
    raw.close()


def test_a_descriptor_that_is_not_a_memory_file_is_refused(tmp_path) -> None:
    path = tmp_path / "plain"
    path.write_bytes(b"\0" * N)
    judge, _raw = _answer_with(os.open(path, os.O_RDONLY))
    with pytest.raises(ValueError, match="not a sealable memory file"):
        judge.recv_reply(None, N)
    r, w = os.pipe()
    os.close(w)
    judge, _raw = _answer_with(r)
    with pytest.raises(ValueError, match="not a memory file"):
        judge.recv_reply(None, N)


@pytest.mark.parametrize("shm, words", [
    ({"offsets": [8], "size": N}, "outside the memory file"),
    ({"offsets": [0], "size": 1 << 40}, "memory file of"),
    ({"offsets": [], "size": N}, "does not match"),
    ({"offsets": [0], "size": 2 * N}, "holds"),  # larger than the file really is
])  # fmt: skip
def test_a_layout_the_file_cannot_hold_is_refused(shm: dict, words: str) -> None:
    judge, raw = _answer_with(_memfd(N, sealed=True), shm)
    with pytest.raises(ValueError, match=words):
        judge.recv_reply(None, 4 * N)
    raw.close()

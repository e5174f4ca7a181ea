"""Hostile inputs: invalid arguments to every public function and CLI command.

Contract: each ends in a TypeError/ValueError (CLI: exit 2 with "blockattn CMD: error: ...")
whose message names the offending argument; never another exception, a hang, or a result.
Every case here is rejected before a kernel launches, so a missed rejection shows up as a
returned value (test failure), not as a slow interpreter run to time out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import oracles
from blockattn import block_attention, cli, projection_rotary_attention
from blockattn.cases.generate import make_case

T, H, D = 68, 1, 64  # lengths (3, 65): a partial block and a full one + 1
BASE = make_case(lengths=[3, 65], H=H, D=D, dtype=torch.bfloat16, seed=1)
OK_EXC = (TypeError, ValueError)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # for the two tests that run a kernel
# Hypothesis draws the corruption; each run is a cheap check, so the example budget stays small.
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _overlapping_out() -> torch.Tensor:
    return BASE.q.as_strided((T, H, D), (0, D, 1))  # every token aliases token 0


# (argument, replacement, message fragment). Replacements are lambdas so each call is fresh.
ATTN_BAD: list[tuple[str, Callable[[], object], str]] = [
    ("q", lambda: BASE.q.to(torch.int32), "q.dtype"),
    ("q", lambda: BASE.q.double(), "q.dtype"),
    ("q", lambda: BASE.q[:, 0], "q must be jagged"),
    ("q", lambda: BASE.q[None], "q must be jagged"),
    ("q", lambda: BASE.q.tolist(), "q must be a torch.Tensor"),
    ("q", lambda: None, "q must be a torch.Tensor"),
    ("k", lambda: BASE.k[:-1], "k.shape"),
    ("v", lambda: BASE.v.half(), "v.dtype"),
    ("k", lambda: BASE.k.to("meta"), "k is on meta"),
    ("q", lambda: BASE.q[..., :32], "q.shape"),
    ("v", lambda: BASE.v.expand(T, 2, D), "v.shape"),
    ("offsets", lambda: BASE.offsets.float(), "offsets.dtype"),
    ("offsets", lambda: BASE.offsets.to(torch.int16), "offsets.dtype"),
    ("offsets", lambda: BASE.offsets[None], "offsets must be 1-D"),
    ("offsets", lambda: BASE.offsets[:0], "offsets must be 1-D"),
    ("offsets", lambda: [0, 3, 68], "offsets must be a torch.Tensor"),
    ("offsets", lambda: torch.tensor([1, 3, 68], dtype=torch.int32), "offsets[0]"),
    ("offsets", lambda: torch.tensor([0, 3, 67], dtype=torch.int32), "offsets[-1]"),
    ("offsets", lambda: torch.tensor([0, 70, 68], dtype=torch.int32), "non-decreasing"),
    ("offsets", lambda: torch.tensor([0, -5, 68], dtype=torch.int32), "non-decreasing"),
    ("offsets", lambda: torch.tensor([0, 2**31 - 1, 68], dtype=torch.int64), "non-decreasing"),
    ("offsets", lambda: BASE.offsets.to("meta"), "offsets is on meta"),
    ("block_size", lambda: 0, "block_size"),
    ("block_size", lambda: -64, "block_size"),
    ("block_size", lambda: 129, "block_size"),
    ("block_size", lambda: 64.0, "block_size"),
    ("block_size", lambda: True, "block_size"),
    ("block_size", lambda: "64", "block_size"),
    ("scale", lambda: float("nan"), "scale"),
    ("scale", lambda: float("inf"), "scale"),
    ("scale", lambda: "0.1", "scale"),
    ("scale", lambda: True, "scale"),
    ("scale", lambda: 1j, "scale"),
    ("sinu_pos", lambda: BASE.sinu_pos[:-1], "sinu_pos.shape"),
    ("sinu_pos", lambda: BASE.sinu_pos.to(torch.int32), "sinu_pos.dtype"),
    ("sinu_pos", lambda: BASE.sinu_pos.to("meta"), "sinu_pos is on meta"),
    ("sinu_pos", lambda: BASE.sinu_pos.tolist(), "sinu_pos must be a torch.Tensor"),
    ("sinu_pos", lambda: BASE.sinu_pos.clone().requires_grad_(True), "sinu_pos.requires_grad"),
    ("max_seq_len", lambda: -1, "max_seq_len"),
    ("max_seq_len", lambda: 1.5, "max_seq_len"),
    ("max_seq_len", lambda: True, "max_seq_len"),
    ("max_seq_len", lambda: 64, "max_seq_len"),  # below the longest sequence (65)
    ("rotate_v", lambda: "no", "rotate_v"),
    ("rotate_v", lambda: None, "rotate_v"),
]


def _attn_kwargs() -> dict[str, object]:
    return dict(q=BASE.q, k=BASE.k, v=BASE.v, offsets=BASE.offsets, sinu_pos=BASE.sinu_pos)


def _expect_named_error(kw: dict[str, object], name: str, make: Callable, frag: str) -> None:
    """Replace argument `name` by make() and call block_attention: it must raise an OK_EXC
    whose message contains `frag`."""
    kw[name] = make()
    offsets = kw.pop("offsets")
    with pytest.raises(OK_EXC) as ei:
        block_attention(kw.pop("q"), kw.pop("k"), kw.pop("v"), offsets, **kw)
    assert frag in str(ei.value), (name, frag, str(ei.value))


@FAST
@given(
    bad=st.sampled_from(ATTN_BAD),
    off64=st.booleans(),
    rotary=st.booleans(),
    block_size=st.sampled_from([16, 64, 128]),
    max_seq_len=st.sampled_from([None, 65, 1000]),
)
def test_block_attention_rejects_and_names_the_argument(
    bad, off64: bool, rotary: bool, block_size: int, max_seq_len: int | None
) -> None:
    # One corrupted argument among otherwise valid, randomly varied ones: the rejection and its
    # message must not depend on the rest of the call.
    name, make, frag = bad
    kw = _attn_kwargs()
    kw.update(block_size=block_size, max_seq_len=max_seq_len)
    if off64:
        kw["offsets"] = BASE.offsets.to(torch.int64)
    if not rotary:
        kw["sinu_pos"] = None
    _expect_named_error(kw, name, make, frag)


def test_block_attention_bad_arguments_table() -> None:
    # Deterministic sweep over the whole table (Hypothesis samples it; this covers every row).
    for name, make, frag in ATTN_BAD:
        _expect_named_error(_attn_kwargs(), name, make, frag)


def test_non_contiguous_and_overlapping_inputs_match_contiguous_copies() -> None:
    # Any token/head strides are legal inputs (read-only): results must equal contiguous copies.
    lengths = [3, 65]
    c = make_case(lengths=lengths, H=2, D=64, dtype=torch.bfloat16, seed=2)
    ck, cv, off = c.k.to(DEVICE), c.v.to(DEVICE), c.offsets.to(DEVICE)
    wide = torch.cat([c.q.to(DEVICE), ck], dim=-1)  # (T, H, 128): q is a D-strided view
    q = wide[..., :64]
    k_over = ck[:1].expand(ck.shape[0], -1, -1)  # token stride 0: all tokens alias one row
    v_t = cv.transpose(0, 1).contiguous().transpose(0, 1)  # head-major layout
    got = block_attention(q, k_over, v_t, off)
    want = block_attention(q.contiguous(), k_over.contiguous(), v_t.contiguous(), off)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_outputs_never_alias_inputs() -> None:
    q, k, v, off = (t.to(DEVICE) for t in (BASE.q, BASE.k, BASE.v, BASE.offsets))
    o = block_attention(q, k, v, off)
    for t in (q, k, v):
        assert o.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


X = torch.randn(T, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
W = torch.randn(16, 3 * H * D, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
PROJ_BAD: list[tuple[str, Callable[[], object], str]] = [
    ("x", lambda: X[None], "x must be a 2-D"),
    ("x", lambda: X.tolist(), "x must be a 2-D"),
    ("x", lambda: X.to(torch.int32), "must match x"),
    ("x", lambda: X.double(), "must match x"),
    ("w", lambda: W[:-1], "w.shape[0]"),
    ("w", lambda: W[:, :-1], "w.shape[1]"),
    ("w", lambda: W.half(), "w ("),
    ("w", lambda: torch.zeros(16, 3 * 32, dtype=torch.bfloat16), "head_dim"),
    ("bias", lambda: torch.zeros(5, dtype=torch.bfloat16), "bias.shape"),
    ("bias", lambda: torch.zeros(3 * H * D, dtype=torch.float16), "bias ("),
    ("qheads", lambda: 0, "qheads"),
    ("qheads", lambda: True, "qheads"),
    ("qheads", lambda: "1", "qheads"),
    ("kvheads", lambda: 2, "kvheads"),
    ("offsets", lambda: torch.tensor([0, 3, 69], dtype=torch.int32), "offsets[-1]"),
    ("sinu_pos", lambda: BASE.sinu_pos[:, :32], "sinu_pos.shape"),
    ("block_size", lambda: 0, "block_size"),
]


@FAST
@given(st.sampled_from(PROJ_BAD))
def test_projection_rejects_and_names_the_argument(bad) -> None:
    name, make, frag = bad
    kw: dict[str, object] = dict(
        x=X, w=W, sinu_pos=BASE.sinu_pos, offsets=BASE.offsets, qheads=H, bias=None
    )
    kw[name] = make()
    with pytest.raises(OK_EXC) as ei:
        projection_rotary_attention(
            kw.pop("x"), kw.pop("w"), kw.pop("sinu_pos"), kw.pop("offsets"), **kw
        )
    assert frag in str(ei.value), str(ei.value)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64], ids=["int32", "float64"])
def test_projection_rejects_unsupported_dtype_by_name(dtype: torch.dtype) -> None:
    # x and w agree with each other but not with the kernels: the error must name x, not q.
    with pytest.raises(TypeError, match=r"x\.dtype"):
        projection_rotary_attention(X.to(dtype), W.to(dtype), BASE.sinu_pos, BASE.offsets, qheads=H)


def test_head_dim_error_names_w() -> None:
    w = torch.zeros(16, 3 * H * 96, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim"):
        projection_rotary_attention(
            X, w, BASE.sinu_pos[:, :1].expand(T, 96), BASE.offsets, qheads=H
        )


# ----------------------------------------------------------------------------- oracles
ORACLE_CALLS: dict[str, Callable[..., object]] = {
    "block_attention": lambda q, k, v, off, s, g, **kw: oracles.block_attention(q, k, v, off, **kw),
    "block_attention_backward": lambda q, k, v, off, s, g, **kw: oracles.block_attention_backward(
        q, k, v, off, g, **kw
    ),
    "rotary_block_attention": lambda q, k, v, off, s, g, **kw: oracles.rotary_block_attention(
        q, k, v, off, s, **kw
    ),
    "rotary_block_attention_backward": lambda q, k, v, off, s, g, **kw: (
        oracles.rotary_block_attention_backward(q, k, v, off, s, g, **kw)
    ),
}
ORACLE_BAD: list[tuple[str, Callable[[], object], str]] = [
    ("q", lambda: BASE.q.to(torch.int32), "q"),
    ("k", lambda: BASE.k[:-1], "k"),
    ("v", lambda: BASE.v[:, :, :-2], "v"),
    ("q", lambda: "q", "q"),
    ("off", lambda: BASE.offsets.float(), "offsets"),
    ("off", lambda: torch.tensor([0, 70, 68]), "offsets"),
    ("off", lambda: torch.tensor([0, 3, 60]), "offsets"),
    ("off", lambda: torch.tensor([], dtype=torch.int64), "offsets"),
    ("off", lambda: BASE.offsets.to("meta"), "offsets"),
    ("g", lambda: BASE.grad_out[:-1], "grad_out"),
    ("s", lambda: BASE.sinu_pos[:, :-2], "sinu_pos"),
    ("block_size", lambda: 0, "block_size"),
    ("block_size", lambda: 2.5, "block_size"),
    ("scale", lambda: float("nan"), "scale"),
    ("max_blocks_per_chunk", lambda: 0, "max_blocks_per_chunk"),
]


@FAST
@given(st.sampled_from(sorted(ORACLE_CALLS)), st.sampled_from(ORACLE_BAD))
def test_oracles_reject_and_name_the_argument(fn: str, bad) -> None:
    name, make, frag = bad
    if (name == "g" and "backward" not in fn) or (name == "s" and "rotary" not in fn):
        return  # that function has no such argument
    args = dict(q=BASE.q, k=BASE.k, v=BASE.v, off=BASE.offsets, s=BASE.sinu_pos, g=BASE.grad_out)
    kw: dict[str, object] = {}
    if name in args:
        args[name] = make()
    else:
        kw[name] = make()
    with pytest.raises(OK_EXC) as ei:
        ORACLE_CALLS[fn](*args.values(), **kw)
    assert frag in str(ei.value), (fn, name, str(ei.value))


def test_oracle_rotary_and_projection_reject_by_name() -> None:
    with pytest.raises(ValueError, match="sinu_pos"):
        oracles.rotary(BASE.q, BASE.sinu_pos[:-1])
    with pytest.raises(TypeError, match="grad"):
        oracles.rotary_backward(BASE.q.to(torch.int64), BASE.sinu_pos)
    x, w = X.double(), W.double()
    with pytest.raises(OK_EXC, match="qheads"):
        oracles.projection_rotary_block_attention(x, w, None, BASE.sinu_pos, BASE.offsets, 0, 1)
    with pytest.raises(OK_EXC, match="w"):
        oracles.projection_rotary_block_attention(
            x, w[:-1], None, BASE.sinu_pos, BASE.offsets, 1, 1
        )


# ----------------------------------------------------------------------------- make_case
CASE_BAD: list[tuple[dict, str]] = [
    (dict(B=0), "B"),
    (dict(max_len=0), "max_len"),
    (dict(H=0), "H"),
    (dict(D=33), "D"),
    (dict(D=0), "D"),
    (dict(dtype=torch.int32), "dtype"),
    (dict(distribution="bogus"), "distribution"),
    (dict(lengths=[3, -1]), "lengths"),
    (dict(sparsity=1.5), "sparsity"),
    (dict(sparsity=float("nan")), "sparsity"),
]


@FAST
@given(st.sampled_from(CASE_BAD), st.integers(0, 2**31 - 1))
def test_make_case_rejects_and_names_the_argument(bad, seed: int) -> None:
    kw, frag = bad
    with pytest.raises(OK_EXC) as ei:
        make_case(**{"seed": seed, "H": 1, "D": 64, **kw})
    assert frag in str(ei.value), str(ei.value)


# ----------------------------------------------------------------------------- CLI
TOL = str(Path(__file__).resolve().parents[2] / "blockattn" / "tolerances" / "v1.toml")


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse usage errors
        rc = int(e.code)
    return rc, capsys.readouterr().err


def _files(d: Path) -> dict[str, str]:
    (d / "afile").write_text("x")
    (d / "empty").mkdir()
    (d / "nonrecord").mkdir()
    (d / "nonrecord" / "results.jsonl").write_text('{"x": 1}\n')
    (d / "listreport").mkdir()
    (d / "listreport" / "report.json").write_text("[1]")
    (d / "badcases").mkdir()
    (d / "badcases" / "report.json").write_text('{"cases": [1]}')
    (d / "malformed.toml").write_text("not toml [[[\n")
    (d / "v9.toml").write_text('version = "x"\n')
    (d / "list.json").write_text("[1, 2]")
    (d / "notjson.json").write_text("garbage")
    return {
        k: str(d / k)
        for k in (
            "afile",
            "empty",
            "nonrecord",
            "listreport",
            "badcases",
            "malformed.toml",
            "v9.toml",
            "list.json",
            "notjson.json",
        )
    }


# (argv template, message fragment naming the argument). {name} -> a prepared bad file/dir.
CLI_BAD: list[tuple[list[str], str]] = [
    (["run", "--max-cases", "-1"], "--max-cases"),
    (["run", "--providers", "nosuch", "--max-cases", "1"], "nosuch"),
    (["run", "--under-test", "nosuch", "--max-cases", "1"], "nosuch"),
    (["run", "--out", "{afile}", "--max-cases", "1", "--no-selfcheck"], "afile"),
    (["run", "--tolerances", "{malformed.toml}", "--max-cases", "1"], "malformed.toml"),
    (["run", "--tolerances", "{v9.toml}", "--max-cases", "1"], "v9.toml"),
    (["run", "--tolerances", "{empty}/nope.toml", "--max-cases", "1"], "nope.toml"),
    (["run", "--profile", "bogus"], "--profile"),
    (["run", "--seed", "x"], "--seed"),
    (["gate", "--tolerances", "{malformed.toml}"], "malformed.toml"),
    (["gate", "--tolerances", TOL, "--report", "{empty}/missing"], "missing"),
    (["gate", "--tolerances", TOL, "--report", "{empty}"], "results.jsonl"),
    (["gate", "--tolerances", TOL, "--report", "{nonrecord}"], "results.jsonl:1"),
    (["gate", "--tolerances", TOL, "--report", "{listreport}"], "report.json"),
    (["gate", "--tolerances", TOL, "--report", "{badcases}"], "cases[0]"),
    (
        ["gate", "--tolerances", TOL, "--report", "{badcases}", "--baseline", "{list.json}"],
        "list.json",
    ),
    (["gate", "--tolerances", TOL, "--max-cases", "-2", "--out", "{empty}/g"], "--max-cases"),
    (["gate", "--tolerances", "{empty}/v9.toml"], "v9.toml"),
    (["report", "{empty}/missing"], "missing"),
    (["report", "{nonrecord}"], "results.jsonl:1"),
    (["report", "{afile}"], "afile"),
    (["replay", "{notjson.json}"], "notjson.json"),
    (["replay", "{list.json}"], "list.json"),
    (["replay", "{empty}/nofile.json"], "nofile.json"),
    (["replay", '{"spec": {"seed": "x"}}'], "seed"),
    (["replay", '{"spec": {"H": 0}}'], "H"),
    (["replay", '{"spec": {"variant": "nope"}}'], "variant"),
    (["replay", '{"spec": {"scale": "x"}}'], "scale"),
    (["replay", '{"spec": {"kvheads": 0, "variant": "projection"}}'], "kvheads"),
    (["replay", '{"spec": {"lengths": "abc"}}'], "lengths"),
    (["replay", '{"spec": {"bogus_field": 1}}'], "bogus_field"),
    (["calibrate", "{empty}", "--out", "{empty}/c.toml"], "--out"),
    (["calibrate", "{empty}/missing", "--out", "{empty}/v9.toml"], "missing"),
    (["calibrate", "{nonrecord}", "--out", "{empty}/v9.toml"], "results.jsonl:1"),
    (["selfcheck", "--device", "bogus"], "--device"),
    (["bench", "--seed", "x"], "--seed"),
    (["compile-check", "--bogus"], "--bogus"),
    (["nosuchcommand"], "nosuchcommand"),
    # audit: claims files (missing, malformed, tampered schema), unknown ids, bad counts
    (["audit", "--claims", "{empty}/nope.toml", "--quick"], "--claims"),
    (["audit", "--claims", "{malformed.toml}", "--quick"], "--claims"),
    (["audit", "--claims", "{v9.toml}", "--quick"], "--claims"),
    (["audit", "--claim", "nosuch", "--quick"], "--claim"),
    (["audit", "--seeds", "-1", "--claim", "nosuch"], "--seeds"),
    (["mutants", "--mutant", "nosuch"], "--mutant"),
    (["mutants", "--group", "bogus"], "--group"),
]


@pytest.mark.parametrize("argv,frag", CLI_BAD, ids=[" ".join(a[:3]) for a, _ in CLI_BAD])
def test_cli_rejects_with_exit_2_naming_the_argument(
    argv: list[str], frag: str, tmp_path: Path, capsys
) -> None:
    files = _files(tmp_path)
    for key, path in files.items():
        argv = [a.replace("{" + key + "}", path) for a in argv]
    rc, err = _cli(argv, capsys)
    assert rc == 2, (argv, rc, err[-1500:])
    assert "Traceback" not in err and frag in err, (argv, err[-1500:])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    target=st.sampled_from(["results.jsonl", "report.json", "tolerance", "repro"]),
    blob=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
            max_leaves=8,
        ).map(lambda o: json.dumps(o).encode()),
    ),
)
def test_cli_survives_corrupted_files(target: str, blob: bytes, tmp_path: Path, capsys) -> None:
    # Arbitrary bytes or arbitrary JSON where a blockattn file belongs: exit 2 with a named
    # error, or (torn JSONL lines only) exit 0 with the skipped lines reported. Never a crash.
    import tempfile

    d = Path(tempfile.mkdtemp(dir=tmp_path))  # fresh per example (tmp_path is per test)
    if target in ("results.jsonl", "report.json"):
        (d / target).write_bytes(blob)
        rc, err = _cli(["gate", "--tolerances", TOL, "--report", str(d)], capsys)
        assert rc == 2 and "Traceback" not in err, err[-1500:]
        rc, err = _cli(["report", str(d)], capsys) if target == "results.jsonl" else (2, "")
        assert rc in (0, 2) and "Traceback" not in err, err[-1500:]
        if rc == 0 and blob.strip():
            assert "torn line" in err
    elif target == "tolerance":
        (d / "v9.toml").write_bytes(blob)
        rc, err = _cli(["gate", "--tolerances", str(d / "v9.toml"), "--report", str(d)], capsys)
        assert rc == 2 and "v9.toml" in err, err[-1500:]
    else:
        (d / "r.json").write_bytes(blob)
        assume(not _runnable_spec(blob))  # a valid spec is a real case, not a hostile input
        rc, err = _cli(["replay", str(d / "r.json")], capsys)
        assert rc == 2 and "Traceback" not in err and "error" in err, err[-1500:]


def _runnable_spec(blob: bytes) -> bool:
    from blockattn.cases.spec import CaseSpec

    try:
        payload = json.loads(blob)
        spec = payload.get("spec", payload)
        CaseSpec.from_dict(spec)
        return True
    except Exception:
        return False

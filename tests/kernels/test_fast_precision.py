"""The declared fast precision mode (`precision="fast"`, provider blockattn_fast, accuracy model
fp32-rounded-operands in the tolerance file v6): it meets its own model, it is really
the fast arithmetic (outside the accurate model), and the accurate default is untouched.

These tests are also what kills the fast mode's planted bugs (blockattn/mutants/fast_bugs.py):
the gate judges the accurate kernel, which those bugs do not reach.
"""

from __future__ import annotations

import pytest
import torch

from blockattn import providers
from blockattn.bounds.elementwise import TokenMap, elementwise_metrics
from blockattn.cases.inputs import build_inputs
from blockattn.cases.spec import CaseSpec
from blockattn.judge import tolerances
from blockattn.run.oracle import oracle_bounds, oracle_outputs

V6 = tolerances.default_tolerance_dir() / "v6.toml"
KEYS = ("O", "dQ", "dK", "dV")
# the kernels run compiled on a GPU, under the interpreter on a CPU (never CPU tensors on a GPU
# machine: there the kernels refuse them)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _violations(spec: CaseSpec) -> dict[str, dict[str, int]]:
    """Elements beyond the bound of each model, per tensor, for blockattn_fast's outputs."""
    inp = build_inputs(spec, DEVICE)
    ref = oracle_outputs(inp)
    out = providers.get("blockattn_fast").run(inp, spec.variant)
    tol = tolerances.load(V6)
    tmap = TokenMap(inp.offsets, inp.T, 64, inp.q.device)
    res = {}
    for prov in ("blockattn_fast", "blockattn"):
        model = tol.model_for(prov)
        (e,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
        res[prov] = {
            k: elementwise_metrics(out[k], ref[k], spec.dtype, bound=e[k], c=model.c,
                                   tmap=tmap)["bound"]["violations"]
            for k in KEYS
        }
    return res


@pytest.mark.parametrize(
    "spec",
    [
        CaseSpec(seed=7, variant="rotary", lengths=(64, 30), H=2, D=64, dtype="bfloat16"),
        CaseSpec(seed=11, variant="rotary", lengths=(64, 41), H=1, D=64, dtype="float16",
                 rotate_v=False),
        CaseSpec(seed=5, variant="plain", lengths=(64, 64), H=1, D=64, dtype="bfloat16",
                 distribution="near_constant"),
    ],
    ids=["rotary-bf16", "rotary-qk-fp16", "plain-near-constant"],
)
def test_fast_meets_its_model_and_is_really_fast(spec: CaseSpec) -> None:
    """0 violations of fp32-rounded-operands, and the forward and the backward each outside the
    accurate model (so neither silently runs the accurate kernel)."""
    v = _violations(spec)
    assert v["blockattn_fast"] == dict.fromkeys(KEYS, 0), v
    if spec.distribution == "normal":
        assert v["blockattn"]["O"] > 0, v
        assert v["blockattn"]["dQ"] + v["blockattn"]["dK"] + v["blockattn"]["dV"] > 0, v


def test_precision_argument() -> None:
    import blockattn

    spec = CaseSpec(seed=3, variant="rotary", lengths=(40, 64), H=1, D=64, dtype="bfloat16")
    inp = build_inputs(spec, DEVICE)
    args = (inp.q, inp.k, inp.v, inp.offsets)
    default = blockattn.block_attention(*args, sinu_pos=inp.sinu_pos)
    accurate = blockattn.block_attention(*args, sinu_pos=inp.sinu_pos, precision="accurate")
    fast = blockattn.block_attention(*args, sinu_pos=inp.sinu_pos, precision="fast")
    assert torch.equal(default, accurate)  # accurate is the default
    assert not torch.equal(fast, accurate)
    with pytest.raises(ValueError, match="precision"):
        blockattn.block_attention(*args, precision="fastest")


def test_fast_provider_is_declared() -> None:
    prov = providers.get("blockattn_fast")
    assert prov.accuracy_model == "fp32-rounded-operands"
    assert not prov.supports.projection
    tol = tolerances.load(V6)
    assert tol.released_as is not None  # released (MANIFEST), judged without --allow-unreleased
    assert tol.model_for("blockattn").name == "fp32-split-operands"  # blockattn's rule as is


@pytest.mark.slow  # 8 s under the interpreter: the CI tier's budget for new tests is spent above
def test_opcheck_fast_ops() -> None:
    """The fast mode's own custom ops pass opcheck (schema, autograd registration, fake tensor,
    AOT dispatch), as the accurate ones do (tests/kernels/test_ops_integration.py)."""
    import blockattn.ops  # noqa: F401  (registers torch.ops.blockattn)

    spec = CaseSpec(seed=4, variant="rotary", lengths=(20, 16), H=1, D=64, dtype="bfloat16")
    inp = build_inputs(spec, DEVICE)
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (inp.q, inp.k, inp.v))
    offsets = inp.offsets.to(torch.int32)
    args = (q, k, v, offsets, inp.sinu_pos, 64, 0.125, True, None)
    torch.library.opcheck(torch.ops.blockattn.attention_fast_fwd.default, args)
    bargs = (inp.grad_out, *(t.detach() for t in (q, k, v)), offsets, inp.sinu_pos, 64, 0.125,
             True, 20)
    torch.library.opcheck(torch.ops.blockattn.attention_fast_bwd.default, bargs)

"""Provider registry and the baselines' plumbing (eager vs the FP64 oracle, FA2 cu_seqlens)."""

from __future__ import annotations

import pytest
import torch

from blockattn import providers
from blockattn.cases.spec import CaseSpec
from blockattn.judge.evaluate import evaluate_case
from blockattn.providers import _common


def test_registry_discovers_every_provider_module() -> None:
    names = set(providers.all_providers())
    assert {"blockattn", "eager", "fa2", "flex", "tlx"} <= names
    with pytest.raises(ValueError, match="unknown provider"):
        providers.get("no-such-provider")


def test_block_cu_seqlens_cuts_every_64_tokens_per_sequence() -> None:
    # lengths [0, 1, 64, 130, 0] -> blocks [1], [64], [64, 64, 2]
    off = torch.tensor([0, 0, 1, 65, 195, 195], dtype=torch.int32)
    cu = _common.block_cu_seqlens(off).tolist()
    assert cu == [0, 1, 65, 129, 193, 195]


def test_block_layout_slots() -> None:
    off = torch.tensor([0, 65, 66], dtype=torch.int32)  # lengths 65, 1 -> blocks 2 + 1
    slot, nb = _common.block_layout(off, 66)
    assert nb == 3
    assert slot[:3].tolist() == [0, 1, 2] and slot[64].item() == 64  # 2nd block of seq 0
    assert slot[65].item() == 128  # seq 1 starts its own block


@pytest.mark.parametrize("name", ["fa2", "flex"])
def test_gpu_baselines_refuse_cleanly_on_cpu(name: str, device: str) -> None:
    if device == "cuda":
        pytest.skip("CPU behaviour")
    rec = evaluate_case(CaseSpec(seed=3, lengths=(65, 3), H=1), [name], name, name)
    p = rec["providers"][name]
    # Declared in the provider's Supports: recorded, never judged as a failure.
    assert p["status"] == "unsupported" and p["declared"] and "cuda" in p["reason"]


def test_tlx_is_unsupported_without_its_library() -> None:
    rec = evaluate_case(CaseSpec(seed=4, lengths=(5,), H=1), ["tlx"], "tlx", "tlx")
    assert rec["providers"]["tlx"]["status"] == "unsupported"


def test_fa2_refuses_when_fa3_or_fa4_is_active(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.attention as attn

    from blockattn.providers import fa2

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(attn, "current_flash_attention_impl", lambda: None, raising=False)
    assert fa2.refusal("cuda", "bfloat16") is None
    assert "bf16/fp16" in fa2.refusal("cuda", "float32")
    monkeypatch.setattr(attn, "current_flash_attention_impl", lambda: "FA3", raising=False)
    assert "FA3" in fa2.refusal("cuda", "bfloat16")


@pytest.mark.parametrize("variant", ["plain", "rotary", "projection"])
def test_eager_matches_oracle_within_a_few_roundings(variant: str) -> None:
    pytest.importorskip("oracles")
    spec = CaseSpec(seed=11, variant=variant, lengths=(0, 1, 63, 65), H=2, dtype="bfloat16")
    rec = evaluate_case(spec, ["eager"], "eager", "eager")
    p = rec["providers"]["eager"]
    assert p["status"] == "ok", p
    for t, m in p["tensors"].items():
        # bf16 eager does ~3 roundings per stage (scores, softmax, PV): 8 floors is generous
        # for a correct implementation yet far below a masking/rotary bug (err/floor >> 100).
        assert m["ratio_to_floor"] is not None and m["ratio_to_floor"] < 8, (t, m)
        assert m["nonfinite_bad"] == 0


def test_error_and_input_mutation_are_recorded_not_raised() -> None:
    pytest.importorskip("oracles")

    def crash(inputs, variant):
        raise RuntimeError("boom")

    def mutate(inputs, variant):
        inputs.k.mul_(2)  # an in-place write to an input: must be caught and undone
        return providers.get("eager").run(inputs, variant)

    providers.register("t-crash", crash)
    providers.register("t-mutate", mutate)
    try:
        spec = CaseSpec(seed=12, lengths=(70,), H=1)
        rec = evaluate_case(spec, ["t-crash", "t-mutate", "eager"], "t-crash", "eager")
    finally:
        providers.unregister("t-crash")
        providers.unregister("t-mutate")
    assert rec["providers"]["t-crash"]["status"] == "error"
    assert "boom" in rec["providers"]["t-crash"]["reason"]
    assert "modified its input 'k'" in rec["providers"]["t-mutate"]["reason"]
    # eager ran after the mutation on restored inputs, so it is still accurate.
    assert rec["providers"]["eager"]["tensors"]["O"]["ratio_to_floor"] < 8


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["plain", "rotary", "projection"])
def test_fa2_matches_oracle_on_gpu(variant: str) -> None:
    pytest.importorskip("oracles")
    spec = CaseSpec(seed=13, variant=variant, lengths=(0, 1, 63, 64, 65, 300), H=2)
    rec = evaluate_case(spec, ["fa2", "eager"], "fa2", "eager")
    p = rec["providers"]["fa2"]
    assert p["status"] == "ok", p
    for t, m in p["tensors"].items():
        assert m["ratio_to_floor"] is not None and m["ratio_to_floor"] < 8, (t, m)

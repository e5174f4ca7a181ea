"""Elementwise verdict tables and views (blockattn/bounds/RECORD.md), driven by synthetic records:
Markdown numbers come from the records, violations sort first and read VIOLATED, old records
(no `ulp` / `bound`) render with "-", and the HTML report holds histogram / localisation
sections exactly when the records call for them, with or without matplotlib."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from harness_helpers import page_text as _page_text

from blockattn.judge.verdict import Verdict
from blockattn.report import charts, elementwise
from blockattn.report import html as report
from blockattn.report.summarize import (
    elementwise_markdown,
    loc_summary,
    markdown_tables,
    tensor_table,
    verdict_markdown,
)

HAS_MPL = importlib.util.find_spec("matplotlib") is not None

# ---------------------------------------------------------------------------------------------
# Fixture factory: records shaped like results.jsonl lines (runner.evaluate_case + RECORD.md).

LO, STEP, NBINS = -8.0, 0.25, 48  # bins cover 2^-8 .. 2^4 ulp


def hist(bins: dict[float, int], exact: int = 0, nonfinite: int = 0) -> dict[str, Any]:
    """Histogram with `count` elements in the bin starting at log2(ulp) = key."""
    counts = [0] * NBINS
    for log2_e, c in bins.items():
        counts[min(NBINS - 1, max(0, int((log2_e - LO) // STEP)))] += c
    return {"log2_lo": LO, "log2_step": STEP, "counts": counts, "exact": exact,
            "nonfinite": nonfinite}  # fmt: skip


def ulp(
    cr: float = 99.0,
    faithful: float = 100.0,
    p9999: float | None = 0.9,
    mx: float | None = 1.2,
    h: dict[str, Any] | None = None,
    not_tiny: float | None = 0.75,
) -> dict[str, Any]:
    return {
        "pct_correctly_rounded": cr,
        "pct_faithful": faithful,
        "quantiles": {"p50": 0.2, "p99": 0.45, "p99.9": 0.6, "p99.99": p9999, "max": mx},
        "hist": h or hist({-3.0: 500, -1.5: 400, -0.75: 90, 0.1: 10}, exact=20),
        "worst": {"token": 5, "head": 1, "dim": 7, "seq": 0, "block": 0, "row": 5,
                  "value": 1.0, "oracle": 0.99, "ulp": mx},
        "not_tiny": {"rel": 2.0**-10, "n": 900, "pct_correctly_rounded": cr, "max": not_tiny},
    }  # fmt: skip


def loc_map(kind: str, H: int = 4, D: int = 64, nb: int = 6, bucket: int = 1) -> dict[str, Any]:
    """A localisation map with the shape of a bug: 'rows' (rows 48-63 of every block: masking),
    'head' (head 2 only: stride), 'odd_dims' (odd dims: rotary pair)."""
    inside = 0.3

    def bad(r: int, d: int) -> bool:
        return (kind == "rows" and r >= 48) or (kind == "odd_dims" and d % 2 == 1) or kind == "head"

    return {
        "row_dim": [[4.0 if bad(r, d) else inside for d in range(D)] for r in range(64)],
        "by_head": [4.0 if kind != "head" or h == 2 else inside for h in range(H)],
        "by_block": [4.0 if kind != "rows" or b == nb - 1 else inside for b in range(nb)],
        "block_bucket": bucket,
    }


def bound(
    violations: int = 0,
    pct: float = 0.0,
    max_ratio: float | None = 0.5,
    loc: dict[str, Any] | None = None,
    model: str = "fwd-v1",
    c: float = 2.0,
    growth: float | None = 2.0,
) -> dict[str, Any]:
    worst = {"token": 50, "head": 2, "dim": 3, "seq": 0, "block": 0, "row": 50,
             "value": 1.5, "oracle": 1.0, "err": 0.5, "bound": 0.125}  # fmt: skip
    return {
        "model": model, "c": c, "model_sha": "0" * 12, "violations": violations,
        "pct_violations": pct, "max_ratio": max_ratio, "growth": growth,
        "worst": worst if violations else None,
        "loc": loc if violations else None,
    }  # fmt: skip


def tm(
    numel: int = 1000,
    ratio_to_floor: float | None = 1.5,
    ulp_: dict[str, Any] | None = None,
    bound_: dict[str, Any] | str | None = "absent",
) -> dict[str, Any]:
    """Tensor metrics: the whole-tensor fields of metrics.py, plus ulp/bound when given."""
    m: dict[str, Any] = {
        "numel": numel, "floor_eff": 1e-3, "nonfinite_bad": 0, "ref_nonfinite": 0,
        "max_abs": 1e-3, "mean_abs": 1e-4, "max_rel": 1e-2, "snr_db": 50.0, "snr_inf": False,
        "rounding_floor": 1e-3, "ratio_to_floor": ratio_to_floor, "over_tol": 0,
        "pct_over_tol": 0.0, "ref_max_abs": 1.0,
        "worst": {"token": 0, "head": 0, "dim": 0, "value": 1.0, "oracle": 1.0, "abs_err": 1e-3},
    }  # fmt: skip
    if ulp_ is not None:
        m["ulp"] = ulp_
    if bound_ != "absent":
        m["bound"] = bound_
    return m


def make_record(
    case_id: str,
    tensors: dict[str, dict[str, dict[str, Any]]],
    *,
    variant: str = "plain",
    dtype: str = "bfloat16",
    under_test: str = "blockattn",
    baseline: str = "eager",
    status: dict[str, str] | None = None,
) -> dict[str, Any]:
    """tensors: provider -> tensor name -> tm(...)."""
    provs: dict[str, Any] = {
        name: {"status": "ok", "reason": None, "time_s": 0.1, "tensors": ts}
        for name, ts in tensors.items()
    }
    for name, st in (status or {}).items():
        provs[name] = {"status": st, "reason": "synthetic", "time_s": 0.0}
    rec = {
        "case_id": case_id,
        "spec": {"seed": 0, "variant": variant, "B": 2, "max_len": 128, "sparsity": 0.5,
                 "lengths": None, "H": 4, "D": 64, "dtype": dtype, "distribution": "normal",
                 "scale": None, "rotate_v": True, "kvheads": None, "source": "corpus",
                 "name": f"synthetic-{case_id}"},
        "device": "cpu", "arch": None, "under_test": under_test, "baseline": baseline,
        "providers": provs, "oracle_error": None, "T": 200, "max_seq_len": 128, "n_seqs": 2,
        "realized_sparsity": 0.2,
    }  # fmt: skip
    if under_test in tensors and baseline in tensors:
        rec["vs_baseline"] = {t: 1.0 for t in tensors[under_test]}
    return rec


def single(case_id: str, m: dict[str, Any], tensor: str = "O", **kw) -> dict[str, Any]:
    """A record with one provider (blockattn) and one tensor."""
    return make_record(case_id, {"blockattn": {tensor: m}}, **kw)


def clean_record(case_id: str = "plai-bflo-clean", **kw) -> dict[str, Any]:
    """Elementwise fields, every element inside its bound."""
    return make_record(
        case_id,
        {
            "blockattn": {
                "O": tm(ulp_=ulp(), bound_=bound()),
                "dQ": tm(ulp_=ulp(), bound_=bound()),
            },
            "eager": {"O": tm(ulp_=ulp(), bound_=bound()), "dQ": tm(ulp_=ulp(), bound_=bound())},
        },
        **kw,
    )


def violating_record(kind: str = "rows", case_id: str = "plai-bflo-viol") -> dict[str, Any]:
    """blockattn dK breaks its bound with a `kind`-shaped loc map; the rest is clean."""
    bad = bound(violations=12, pct=0.3, max_ratio=4.0, loc=loc_map(kind))
    return make_record(
        case_id,
        {
            "blockattn": {"O": tm(ulp_=ulp(), bound_=bound()), "dK": tm(ulp_=ulp(), bound_=bad)},
            "eager": {"O": tm(ulp_=ulp(), bound_=bound()), "dK": tm(ulp_=ulp(), bound_=bound())},
        },
    )


def old_record(case_id: str = "plai-bflo-old0", variant: str = "plain") -> dict[str, Any]:
    """A record written before RECORD.md: no ulp, no bound."""
    return make_record(
        case_id,
        {"blockattn": {"O": tm(), "dQ": tm()}, "eager": {"O": tm(), "dQ": tm()}},
        variant=variant,
    )


def table(md: str, first_header: str = "provider", must_have: str = "") -> list[dict[str, str]]:
    """Rows (header -> cell) of the first Markdown table whose header starts with
    `first_header` and contains `must_have`."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header and must_have in line:
            rows = []
            for body in lines[i + 2 :]:
                if not body.startswith("|"):
                    break
                rows.append(
                    dict(zip(cells, [c.strip() for c in body.strip().strip("|").split("|")],
                             strict=True))
                )  # fmt: skip
            return rows
    raise AssertionError(f"no table starting with {first_header!r} ({must_have!r}) in:\n{md}")


def row_of(rows: list[dict[str, str]], **want: str) -> dict[str, str]:
    hits = [r for r in rows if all(r[k] == v for k, v in want.items())]
    assert len(hits) == 1, (want, rows)
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Markdown


def test_elementwise_markdown_shows_the_records_numbers() -> None:
    ua = ulp(cr=97.5, faithful=99.0, p9999=0.9, mx=2.0, not_tiny=1.25)
    ub = ulp(cr=99.5, faithful=100.0, p9999=1.4, mx=3.5, not_tiny=0.5)
    a = single("plai-bflo-a", tm(numel=1000, ulp_=ua, bound_=bound(max_ratio=0.25, growth=7.5)))
    b = single("plai-bflo-b", tm(numel=3000, ulp_=ub, bound_=bound(max_ratio=0.5, growth=3.0)))
    md = elementwise_markdown([a, b])
    row = row_of(table(md), provider="blockattn", tensor="O")
    assert row["cases"] == "2"
    assert row["% correctly rounded"] == "99.00"  # (97.5 * 1000 + 99.5 * 3000) / 4000
    assert row["% faithful"] == "99.75"  # (99 * 1000 + 100 * 3000) / 4000
    assert row["p99.99 ulp"] == "1.4"  # worst case's: an upper bound of the pooled quantile
    assert row["max ulp"] == "3.5"
    assert row["max ulp, not tiny"] == "1.25"  # max(1.25, 0.5)
    assert row["violations"] == "0 (0%)"
    assert row["headroom"] == "3x"  # min(7.5, 3): the worst case's growth factor
    assert row["bound model"] == "fwd-v1 c=2"
    assert "Bound violations" not in md  # nothing violated: no case list


def test_violations_sort_first_and_read_violated() -> None:
    recs = [clean_record(), violating_record("head")]
    md = elementwise_markdown(recs)
    rows = table(md)
    assert (rows[0]["provider"], rows[0]["tensor"]) == ("blockattn", "dK")
    assert rows[0]["headroom"] == "VIOLATED"
    assert rows[0]["violations"] == "12 (0.3%)"
    # then the provider under test; the others' clean rows are folded away
    assert [(r["provider"], r["tensor"]) for r in rows[1:]] == [("blockattn", "O"),
                                                               ("blockattn", "dQ")]  # fmt: skip
    fold = md[md.index("<details>") : md.index("</details>")]
    assert "3 more rows, within their bounds: eager" in fold
    folded = table(fold)
    assert [(r["provider"], r["tensor"]) for r in folded] == [("eager", "O"), ("eager", "dK"),
                                                             ("eager", "dQ")]  # fmt: skip
    assert all(r["headroom"] == "2x" for r in folded)
    # a violating baseline is not folded: it sorts with the failures
    eager_bad = violating_record("rows", case_id="plai-bflo-eag")
    eager_bad["providers"]["eager"], eager_bad["providers"]["blockattn"] = (
        eager_bad["providers"]["blockattn"],
        eager_bad["providers"]["eager"],
    )
    rows = table(elementwise_markdown([clean_record(), eager_bad]))
    assert (rows[0]["provider"], rows[0]["tensor"], rows[0]["headroom"]) == (
        "eager",
        "dK",
        "VIOLATED",
    )
    assert "1 provider x tensor group(s) violate" in md
    cases = table(md, "case")
    assert len(cases) == 1
    assert cases[0]["case"].startswith("`plai-bflo-viol`")
    assert cases[0]["max err/bound"] == "4"
    assert cases[0]["worst element"] == "seq=0 block=0 row=50 token=50 head=2 dim=3"
    assert cases[0]["where"] == "heads 2; rows all; dims all; blocks all"


def test_unbounded_values_are_inf_and_violated() -> None:
    # JSON None inside ulp/bound means inf: a NaN output gives max ulp None, max_ratio None.
    b = bound(violations=3, pct=0.1, max_ratio=None, loc=loc_map("rows"))
    rec = single("plai-bflo-nan", tm(ulp_=ulp(p9999=None, mx=None), bound_=b))
    row = row_of(table(elementwise_markdown([rec])), provider="blockattn", tensor="O")
    assert (row["p99.99 ulp"], row["max ulp"], row["headroom"]) == ("inf", "inf", "VIOLATED")
    assert table(elementwise_markdown([rec]), "case")[0]["max err/bound"] == "inf"


def test_percentages_never_round_to_the_wrong_side() -> None:
    rec = single("plai-bflo-pct", tm(ulp_=ulp(cr=0.001, faithful=99.9999), bound_=bound()))
    row = row_of(table(elementwise_markdown([rec])), tensor="O")
    assert row["% correctly rounded"] == "0.001"
    assert row["% faithful"] == ">99.99"


def test_old_records_render_with_dashes() -> None:
    olds = [old_record(), old_record("rota-bflo-old1", variant="rotary")]
    assert elementwise_markdown(olds) == ""  # nothing to say: gate skips the section
    md_old = markdown_tables(olds)
    assert "correctly rounded" not in md_old  # old runs keep their old (narrower) table
    assert "| blockattn | plain | bfloat16 | O | 1 |" in md_old
    # Mixed: the new columns appear, old-only groups and bound=None read "-".
    no_model = single("plai-bflo-nomodel", tm(ulp_=ulp(), bound_=None))
    mixed = [*olds, clean_record(), no_model]
    full = table(markdown_tables(mixed), must_have="NaN/Inf")
    old_row = row_of(full, provider="blockattn", variant="rotary", tensor="O")
    for col in ("% correctly rounded", "% faithful", "p99.99 ulp", "max ulp", "violations",
                "headroom"):  # fmt: skip
        assert old_row[col] == "-", col
    assert old_row["max err/floor"] == "1.5"  # the old columns are untouched
    ew = table(elementwise_markdown(mixed))
    r = row_of(ew, provider="blockattn", variant="rotary", tensor="O")
    assert (r["% correctly rounded"], r["violations"], r["headroom"]) == ("-", "-", "-")
    # plain blockattn O: 1 old case, 1 bounded, 1 with bound None
    r = row_of(ew, provider="blockattn", variant="plain", tensor="O")
    assert r["cases"] == "3" and r["bound model"] == "fwd-v1 c=2 (1/3 cases)"
    assert r["headroom"] == "2x"


def test_markdown_tables_gains_columns_when_present() -> None:
    md = markdown_tables([clean_record(), violating_record()])
    rows = table(md, must_have="NaN/Inf")
    r = row_of(rows, provider="blockattn", tensor="dK")
    assert (r["violations"], r["headroom"], r["% correctly rounded"]) == (
        "12 (0.3%)",
        "VIOLATED",
        "99.00",
    )
    assert row_of(rows, provider="eager", tensor="dK")["headroom"] == "2x"


def test_non_ok_providers_and_status_counts() -> None:
    rec = clean_record()
    rec["providers"]["torch"] = {"status": "unsupported", "reason": "no", "time_s": 0.0}
    md = markdown_tables([rec])
    assert "| torch | unsupported: 1 |" in md
    assert "torch" not in elementwise_markdown([rec]).split("|---")[1]


def test_loc_summary_names_the_bug_shape() -> None:
    assert loc_summary(loc_map("rows")).startswith("heads all; rows 48-63; dims all")
    assert "blocks 5" in loc_summary(loc_map("rows"))
    assert loc_summary(loc_map("head")).startswith("heads 2;")
    assert "dims odd only (32 of 64)" in loc_summary(loc_map("odd_dims"))
    bucketed = loc_map("rows", nb=300, bucket=4)
    assert "block buckets 299 (of 300, 4 blocks each)" in loc_summary(bucketed)
    assert loc_summary(None) == "-"


def test_tensor_table_is_strict_json() -> None:
    # report.json is written with allow_nan=False: unbounded values must come out as None.
    b = bound(violations=1, pct=0.1, max_ratio=None, loc=loc_map("head"))
    rec = single("plai-bflo-inf", tm(ratio_to_floor=None, ulp_=ulp(mx=None), bound_=b))
    rows = tensor_table([rec, old_record()])
    json.dumps(rows, allow_nan=False)
    r = next(r for r in rows if r["provider"] == "blockattn" and r["tensor"] == "O")
    assert r["max_ratio_to_floor"] is None and r["max_ulp"] is None
    assert r["max_bound_ratio"] is None and r["violations"] == 1
    assert (r["n"], r["n_ulp"], r["n_bounded"]) == (2, 1, 1)  # the old case has neither


def test_verdict_markdown_still_works() -> None:
    v = Verdict("plai-bflo-viol", passed=False, failures=["blockattn dK: bound violated"])
    md = verdict_markdown([v], [violating_record()])
    assert "failed 1" in md and "bound violated" in md


# ---------------------------------------------------------------------------------------------
# HTML report


def _no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in ("matplotlib", "matplotlib.pyplot", "matplotlib.colors"):
        monkeypatch.setitem(sys.modules, mod, None)  # `import matplotlib` -> ImportError
    assert charts._pyplot() is None


def _render(tmp_path: Path, records: list[dict[str, Any]]) -> tuple[str, str, dict[str, Path]]:
    files = report.render(records, tmp_path, partial=False)
    return (tmp_path / "report.html").read_text(), (tmp_path / "report.md").read_text(), files


@pytest.mark.parametrize("mpl", [True, False], ids=["matplotlib", "no-matplotlib"])
def test_html_sections_follow_the_records(tmp_path: Path, monkeypatch, mpl: bool) -> None:
    if mpl and not HAS_MPL:
        pytest.skip("matplotlib not installed")
    if not mpl:
        _no_matplotlib(monkeypatch)
    page, md, files = _render(tmp_path / "viol", [clean_record(), violating_record("rows")])
    assert "id='ulp-histograms'" in page and "id='violation-localisation'" in page
    assert "id='loc-blockattn_dK'" in page
    assert "rows 48-63" in page  # the where-line names the band
    assert "VIOLATED" in page and "VIOLATED" in md
    if mpl:
        for name in ("ulp_hist_O", "ulp_hist_dQ", "ulp_hist_dK", "loc_blockattn_dK"):
            assert files[name].exists() and f'src="plots/{name}.png"' in page, name
    else:
        assert "<table class='hist'>" in page and "<table class='hm'>" in page
        # heatmap cells of the band carry their value; cells inside the bound do not
        red = elementwise._qclass(4.0)
        assert f"<td class={red} title='row 50 dim 3: 4'></td>" in page
        assert f"<td class={elementwise._qclass(0.3)}></td>" in page  # row 10: inside, no tooltip
        assert f"td.{red}{{background:#" in page  # the class is styled
        assert not (tmp_path / "viol" / "plots").exists() or not any(
            (tmp_path / "viol" / "plots").iterdir()
        )

    page, _, files = _render(tmp_path / "clean", [clean_record()])
    assert "id='ulp-histograms'" in page and "id='violation-localisation'" not in page
    assert not any(k.startswith("loc_") for k in files)

    page, md, files = _render(tmp_path / "old", [old_record()])
    assert "id='ulp-histograms'" not in page and "id='violation-localisation'" not in page
    assert "<table class='errors'>" in page and "Elementwise accuracy" not in md
    assert not any(k.startswith(("loc_", "ulp_hist_")) for k in files)


def test_fallback_histogram_counts(tmp_path: Path, monkeypatch) -> None:
    _no_matplotlib(monkeypatch)
    a, b = clean_record("plai-bflo-a"), clean_record("plai-bflo-b")
    page, _, _ = _render(tmp_path, [a, b])
    o = page[page.index("id='hist-O'") : page.index("id='hist-dQ'")]
    # bin [2^-3, 2^-2.75) holds 500 per case per provider: summed over the 2 cases
    row = next(line for line in o.splitlines() if line.startswith("<tr><td>1/8 - 0.149"))
    assert row.count("</span>1000</td>") == 2  # blockattn and eager
    assert "<tr class='edge'><td>1/2 - 0.595 (not correctly rounded from here)</td>" in o
    assert "<tr class='edge'><td>1 - 1.19 (not faithful from here)</td>" in o
    assert "<tr><td>exact (0)</td><td>40</td><td>40</td></tr>" in o


def test_histograms_merge_across_layouts() -> None:
    a = clean_record("plai-bflo-a")
    b = copy.deepcopy(clean_record("plai-bflo-b"))
    # b's producer used coarser bins: 24 bins of 0.5 from -8; its mass at [-3, -2.5) maps
    # into a's bin of the same centre
    coarse = {"log2_lo": -8.0, "log2_step": 0.5, "counts": [0] * 24, "exact": 1, "nonfinite": 2}
    coarse["counts"][10] = 7  # [-3, -2.5), centre -2.75
    b["providers"]["blockattn"]["tensors"]["O"]["ulp"]["hist"] = coarse
    h = elementwise.ulp_histograms([a, b])["O"]["bfloat16"]["blockattn"]
    assert (h["log2_step"], h["cases"], h["exact"], h["nonfinite"]) == (0.25, 2, 21, 2)
    assert h["counts"][int((-2.75 - LO) / STEP)] == 7
    assert sum(h["counts"]) == 1000 + 7


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib not installed")
def test_pngs_fit_the_page(tmp_path: Path) -> None:
    from PIL import Image

    recs = [clean_record(), violating_record("odd_dims"), old_record("rota-bflo-old1", "rotary")]
    f32 = clean_record("plai-fl32-c", dtype="float32")
    for name in ("bench", "fa2", "flash-attn-3", "torch-sdpa", "naive-fp64"):  # wide layouts
        f32["providers"][name] = copy.deepcopy(f32["providers"]["eager"])
    _render(tmp_path, [*recs, f32])
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert {p.stem for p in pngs} >= {"ulp_hist_O", "ulp_hist_dK", "loc_blockattn_dK",
                                      "err_per_dtype_tensor", "err_vs_sparsity"}  # fmt: skip
    for p in pngs:
        with Image.open(p) as im:
            assert im.size[0] <= 1000, (p.name, im.size)
            assert im.format == "PNG"


# ---------------------------------------------------------------------------------------------
# The page a kernel engineer reads at a glance: verdict banner, bound rows, provenance.


def page_text(page: str) -> list[str]:
    return _page_text(page, skip=("style", "script"))


def with_verdict(rec: dict[str, Any], passed: bool, skipped: bool = False) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    fails = [] if passed else [f"blockattn dK: 12 elements beyond the bound ({rec['case_id']})"]
    rec["verdict"] = {"passed": passed, "skipped": skipped, "failures": fails, "warnings": [],
                      "tolerances": "v4"}  # fmt: skip
    if not passed:
        rec["verdict"]["replay"] = f"blockattn replay repro/{rec['case_id']}.json"
    return rec


def mixed_records(seed: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Seeded numbers of passed / failed / skipped / errored cases, every provider status ok
    except the errored ones: the headline must count verdicts, not statuses."""
    rng = random.Random(seed)
    want = {"passed": rng.randint(1, 6), "failed": rng.randint(1, 6),
            "skipped": rng.randint(0, 3), "errored": rng.randint(0, 2)}  # fmt: skip
    recs = [with_verdict(clean_record(f"plai-bflo-p{i}"), True) for i in range(want["passed"])]
    recs += [with_verdict(violating_record(case_id=f"plai-bflo-f{i}"), False)
             for i in range(want["failed"])]  # fmt: skip
    recs += [with_verdict(clean_record(f"plai-bflo-s{i}"), True, skipped=True)
             for i in range(want["skipped"])]  # fmt: skip
    for i in range(want["errored"]):
        rec = with_verdict(clean_record(f"plai-bflo-e{i}"), False)
        rec["providers"]["blockattn"] = {"status": "error", "reason": "boom", "time_s": 0.0}
        recs.append(rec)
    rng.shuffle(recs)
    return recs, want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_banner_counts_verdicts_not_statuses(tmp_path: Path, seed: int) -> None:
    recs, want = mixed_records(seed)
    page, md, _ = _render(tmp_path, recs)
    n = len(recs)
    line = (f"{n} cases judged: {want['passed']} passed, {want['failed']} failed, "
            f"{want['skipped']} skipped (unsupported), {want['errored']} errored")  # fmt: skip
    banner = page[page.index("id='banner'") : page.index("</div>")]
    assert "<h1>FAIL</h1>" in banner and line in banner
    assert md.splitlines()[0] == "# blockattn verification report: FAIL"
    assert f"**{line}**" in md
    # provider statuses still show, labelled as such and outside the banner
    ok = n - want["errored"]
    assert "Provider run status (did it run; not the verdict): blockattn: " in page
    assert f"ok {ok}" not in banner
    assert report.banner(recs)["counts"] == {"cases": n, "judged": n, **want, "not_judged": 0}


def test_banner_pass_and_not_judged(tmp_path: Path) -> None:
    rng = random.Random(3)
    clean = [clean_record(f"plai-bflo-c{i}") for i in range(rng.randint(2, 5))]
    page, _, _ = _render(tmp_path / "pass", [with_verdict(r, True) for r in clean])
    assert "<h1>PASS</h1>" in page
    # --no-tolerances: records without verdicts, even a violating one, are NOT JUDGED
    page, md, _ = _render(tmp_path / "nj", [*clean, violating_record()])
    assert "<h1>NOT JUDGED</h1>" in page and not [c for c in page_text(page) if "PASS" in c]
    assert md.splitlines()[0].endswith(": NOT JUDGED")
    # a failed oracle self-check, or the gate's own FAIL, fails an otherwise passing page
    judged = [with_verdict(r, True) for r in clean]
    checks = [{"name": "closed form", "value": 1e-16, "bound": 1e-12, "passed": True,
               "detail": ""},
              {"name": "rotary vs autograd", "value": 3e-9, "bound": 1e-12, "passed": False,
               "detail": "non-unit table"}]  # fmt: skip
    report.render(judged, tmp_path / "sc", partial=False, meta={}, selfcheck=checks)
    page = (tmp_path / "sc" / "report.html").read_text()
    assert "<h1>FAIL</h1>" in page and "oracle self-check: 1 of 2 check(s) failed" in page
    sc = page[page.index("id='selfcheck'") :]
    assert "<tr class='fail'><td>rotary vs autograd</td><td>3e-09</td>" in sc
    assert report.banner(judged, gate={"decision": "FAIL"})["word"] == "FAIL"
    assert report.banner(judged, gate={"decision": "PASS"})["word"] == "PASS"


def test_html_is_built_not_pasted_markdown(tmp_path: Path) -> None:
    recs, _ = mixed_records(4)
    page, md, _ = _render(tmp_path, recs)
    assert md.startswith("# ") and "`" in md  # the Markdown keeps its syntax ...
    text = page_text(page)  # ... the page shows none of it: headings are tags, code is <code>
    assert not [c for c in text if c.lstrip().startswith("#")]
    assert not [c for c in text if "`" in c]
    assert "<h2 id='failing'>" in page and "<code class='cmd'>blockattn replay" in page


def test_bound_rows_failures_first_in_red(tmp_path: Path) -> None:
    rng = random.Random(5)
    ratios = [rng.uniform(0.05, 0.9) for _ in range(3)]
    growths = [rng.uniform(1.5, 90.0) for _ in range(3)]
    clean = [single(f"plai-bflo-c{i}", tm(ulp_=ulp(), bound_=bound(max_ratio=x, growth=g)),
                    tensor="dQ")
             for i, (x, g) in enumerate(zip(ratios, growths, strict=True))]  # fmt: skip
    page, _, _ = _render(tmp_path, [*clean, violating_record("head")])
    sec = page[page.index("id='bounds'") : page.index("id='provenance'")]
    assert "1 of 5 row(s) fail" in sec  # blockattn O, dQ, dK; eager O, dK
    rows = re.findall(r"<tr class='(fail|pass)'><td>([^<]*)</td><td><b>([^<]*)</b></td>", sec)
    assert rows[0] == ("fail", "blockattn", "dK")
    assert [r[0] for r in rows].count("fail") == 1
    assert ("pass", "blockattn", "dQ") in rows[1:]
    # headroom = the least growth factor over the group's cases, as summarize._headroom has it
    dq = sec[sec.index("<b>dQ</b>") :]
    assert f"<b>{min(growths):.3g}x</b>" in dq[: dq.index("</tr>")]
    assert "<b>VIOLATED</b>" in sec[: sec.index("<b>dQ</b>")]
    assert "tr.fail td{background:#" in page  # red rows are styled


def test_provenance_block(tmp_path: Path) -> None:
    tol = tmp_path / "v4.toml"
    tol.write_text(f"version = 4 # {random.Random(6).random()}\n")
    sha = hashlib.sha256(tol.read_bytes()).hexdigest()
    rec = with_verdict(clean_record(), True)
    rec["tolerances"] = {"version": 4, "sha256": sha}
    meta = {"commit": "deadbee", "device": "cuda", "gpu": "NVIDIA H200", "arch": "sm_90",
            "tolerances": str(tol), "command": "blockattn run --tolerances v4.toml"}  # fmt: skip
    report.render([rec], tmp_path / "a", partial=False, meta=meta, selfcheck=None)
    prov = dict(report.provenance([rec], meta, None))
    assert prov["command"] == meta["command"] and prov["commit"] == "deadbee"
    assert prov["GPU"] == "NVIDIA H200 (sm_90)" and prov["tolerance file"] == str(tol)
    assert prov["tolerances v4 sha256"] == sha
    assert prov["tolerance file check"] == "matches the recorded sha256"
    page = (tmp_path / "a" / "report.html").read_text()
    assert f"<code>{sha}</code>" in page and "not run (--no-selfcheck" in page
    # meta without "command" (runs before it was recorded), and a file edited since the run
    meta.pop("command")
    tol.write_text("version = 4 # edited\n")
    prov = dict(report.provenance([rec], meta, None))
    assert prov["command"] == "not recorded"
    assert prov["tolerance file check"].startswith("DIFFERS: the file now has sha256 ")
    # a gate directory without report.json: the path comes from gate.md
    gate_md = tmp_path / "gate.md"
    gate_md.write_text(f"## blockattn gate: \u274c FAIL\n\nTolerances `{tol}` (v4, released)\n")
    gate = report.read_gate_md(gate_md)
    assert gate == {"decision": "FAIL", "tolerances": str(tol), "unreleased": False}
    prov = dict(report.provenance([rec], None, gate))
    assert prov["tolerance file"] == str(tol) and prov["commit"] == "not recorded"


def _figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Keep every figure report.py closes, to inspect its artists after render()."""
    import matplotlib.pyplot as plt

    kept: list[Any] = []
    monkeypatch.setattr(plt, "close", kept.append)
    return kept


def _sticks_out(fig) -> bool:
    """True when anything drawn (tick labels, titles, axis labels, legends) extends beyond the
    figure: the tight bbox of the drawn artists must lie inside the canvas (0.02 in slack)."""
    fig.canvas.draw()
    t, box = fig.get_tightbbox(fig.canvas.get_renderer()), fig.bbox_inches
    return t.x0 < box.x0 - 0.02 or t.y0 < box.y0 - 0.02 or t.x1 > box.x1 + 0.02 or (
        t.y1 > box.y1 + 0.02
    )


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib not installed")
def test_plots_draw_their_limits_and_keep_labels_inside(tmp_path: Path, monkeypatch) -> None:
    figs = _figures(monkeypatch)
    rng = random.Random(8)
    recs = []
    for dt in ("bfloat16", "float16", "float32"):
        for i in range(3):
            r = clean_record(f"plai-{dt[:4]}-{i}", dtype=dt)
            for name in ("fa2", "flash-attn-3", "torch-sdpa", "naive-fp64"):
                r["providers"][name] = copy.deepcopy(r["providers"]["eager"])
                r["providers"][name]["tensors"]["O"]["bound"]["max_ratio"] = rng.uniform(0, 3)
            recs.append(r)
    recs.append(violating_record("odd_dims"))
    report.render(recs, tmp_path, partial=False)
    assert figs
    for fig in figs:
        name = fig.axes[0].get_title() or fig.texts[0].get_text()
        assert fig.get_figwidth() * charts.DPI <= 1000, name
        assert not _sticks_out(fig), name
        for ax in fig.axes:
            if not (ax.get_visible() and ax.axison) or ax.get_label() == "<colorbar>":
                continue  # hidden spare panels, "no map" placeholders, colour bars
            hs = {round(ln.get_ydata()[0], 6) for ln in ax.get_lines()
                  if len(set(ln.get_ydata())) == 1 and len(ln.get_xdata()) == 2}  # fmt: skip
            vs = {round(ln.get_xdata()[0], 6) for ln in ax.get_lines()
                  if len(set(ln.get_xdata())) == 1 and len(ln.get_ydata()) == 2}  # fmt: skip
            if "ulps of the exact value" in ax.get_title():
                assert {-1.0, 0.0} <= vs, ax.get_title()  # log2: 0.5 ulp and 1 ulp
            elif ax.get_title().startswith("by (row"):
                continue  # the heatmap: its colour scale turns red at the bound
            else:
                assert 1.0 in hs, ax.get_title()  # err/bound = 1
    per_dtype = next(f for f in figs if any(a.get_title().startswith("float32 (fp32)")
                                            for a in f.axes))  # fmt: skip
    labels = {t.get_text() for a in per_dtype.axes for t in a.get_xticklabels()}
    assert labels == {"O", "dQ", "dK"}  # full tensor names, no truncated "bflo O" stacks
    monkeypatch.undo()
    import matplotlib.pyplot as plt

    plt.close("all")

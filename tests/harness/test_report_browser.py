"""The report as a browser shows it: headless Chromium renders a failing report directory
(a planted masking bug beside the real kernel, judged by tolerances v4) and the rendered DOM
must carry the FAIL banner with verdict counts, the provenance sha256, no Markdown syntax as
text, and fit a 1200 px window without sideways scrolling. Skipped where no chromium binary
exists (CI has none)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from harness_helpers import page_text

from blockattn.run.results import load_records

pytest.importorskip("oracles")
REPO = Path(__file__).resolve().parents[2]


def _screenshot_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "report_screenshot", REPO / "benchmarks" / "report_screenshot.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


shots = _screenshot_module()
if shots.find_chromium() is None:
    pytest.skip("no chromium binary on PATH (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("browser") / "run"
    files = shots.build_failing_report(out, command="blockattn run --tolerances v4.toml")
    return out, files


def test_dom_shows_the_verdict_not_markdown(failing_report) -> None:
    out, files = failing_report
    recs = load_records(out)
    n_fail = sum(not r["verdict"]["passed"] for r in recs)
    assert 0 < n_fail < len(recs)  # the fixture has both: partial blocks fail, full ones pass
    dom = shots.dump_dom(files["html"])
    text = [c.strip() for c in page_text(dom)]
    assert text[0] == "FAIL"  # the first thing on the page
    assert (
        f"{len(recs)} cases judged: {len(recs) - n_fail} passed, {n_fail} failed, "
        "0 skipped (unsupported), 0 errored"
    ) in text
    assert not [c for c in text if c.startswith("#") or "`" in c]
    sha = recs[0]["tolerances"]["sha256"]
    assert sha in text and "matches the recorded sha256" in text
    assert "blockattn run --tolerances v4.toml" in text
    assert f"Failing cases: {n_fail}" in text


def test_page_fits_the_window_and_screenshot(failing_report, tmp_path: Path) -> None:
    """No sideways scroll at 1200 px: a script writes the page's scrollWidth into the DOM."""
    out, files = failing_report
    probe = out / "probe.html"
    probe.write_text(
        files["html"].read_text().replace(
            "</body>",
            "<script>document.body.setAttribute('data-scroll-width', "
            "document.documentElement.scrollWidth)</script></body>",
        )
    )
    dom = shots.dump_dom(probe, width=1200)
    width = int(dom.split('data-scroll-width="')[1].split('"')[0])
    assert width <= 1200, width
    png = shots.screenshot(files["html"], tmp_path / "shot.png", 1200, 1600)
    from PIL import Image

    with Image.open(png) as im:
        assert im.size == (1200, 1600)
        rgb = im.convert("RGB")
        # the banner is red (#b2182b) where it sits: a few seeded points inside it
        rng = random.Random(0)
        for _ in range(5):
            x, y = rng.randint(300, 900), rng.randint(30, 40)
            r, g, b = rgb.getpixel((x, y))
            assert r > 150 and g < 60 and b < 80, ((x, y), (r, g, b))

"""Every relative link in README.md, CHANGELOG.md and docs/*.md resolves to a file or folder of
the tree, and every #anchor into a Markdown file names one of its headings (GitHub's slugs,
which mkdocs' toc extension produces too for these headings). mkdocs cannot check links that
leave docs/ (into ../blockattn/, ../results/, ...); this test does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _text(path: Path) -> str:
    return FENCE.sub("", path.read_text())


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    heads = re.findall(r"^#{1,6} (.+?)\s*#*$", _text(path), re.M)
    return {_slug(h) for h in heads}


def _links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_text(path)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_pages_exist() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "CHANGELOG.md", "index.md", "cli.md", "isolation.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    bad = []
    for target in _links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


def test_the_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Top\n[a](missing.md) [b](p.md#top) [c](#nowhere) [d](https://x.y)\n")
    assert _links(page) == ["missing.md", "p.md#top", "#nowhere"]
    assert _anchors(page) == {"top"}
    assert _slug("Planted bugs: `blockattn mutants`") == "planted-bugs-blockattn-mutants"


def test_readme_walkthrough_blocks_exist_and_their_commands_parse() -> None:
    """ci/readme_walkthrough.sh runs the README's marked bash blocks; they must exist, and
    each `blockattn` command in them must be one the CLI accepts."""
    import shlex

    from blockattn import cli

    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"^<!-- walkthrough: ([a-z, ]+) -->\n```bash\n(.*?)^```", text, re.M | re.S)
    tags = [t for t, _ in blocks]
    assert "clone" in tags and "user" in tags
    parser = cli.build_parser()
    calls = 0
    for _, body in blocks:
        for line in body.splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:1] == ["blockattn"]:
                parser.parse_args(argv[1:])
                calls += 1
    assert calls >= 5
    assert "extract" in (REPO / "ci" / "readme_walkthrough.sh").read_text()

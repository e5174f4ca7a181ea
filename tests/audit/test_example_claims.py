"""The README's example claims file loads and names the kernel the README's command gives."""

from pathlib import Path

from blockattn.audit import claims

REPO = Path(__file__).resolve().parents[2]


def test_the_example_claims_file_is_valid() -> None:
    _, cs = claims.load(REPO / "examples" / "claims.toml")
    assert {c.kind for c in cs} == {"speed", "accuracy"}
    assert {c.kernel for c in cs} == {"mine"}
    # the README has the user write the shipped example, then audit it
    readme = (REPO / "README.md").read_text()
    assert "audit --example-claims claims.toml" in readme and "--claims claims.toml" in readme

"""The pytest plugin (blockattn/pytest_plugin.py), used the way a user would: from a scratch repo
outside this one, in a fresh `python -m pytest` process whose environment has no
TRITON_INTERPRET and no xdist/pytest variables, so the plugin must set the interpreter up itself.

The scratch repo holds two outside kernels declared with `@blockattn.providers.kernel`: `clean`
(a thin wrapper of blockattn.block_attention) and `buggy` (softmax scale x 1.01). A few small
corpus cases keep each run to seconds on 2 CPU cores.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KERNELS = '''
import blockattn
from blockattn.providers import Supports, kernel

SUP = Supports(dtypes=("bfloat16", "float16"), head_dims=(64, 128))


@kernel(supports=SUP, accuracy_model="fp32-split-operands")
def clean(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v)


@kernel(supports=SUP, accuracy_model="fp32-split-operands")
def refuser(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    # refuses at run time a case its Supports declares: a failure, never a skip
    raise blockattn.providers.Unsupported("refuser: not today")


@kernel(supports=SUP, accuracy_model="fp32-split-operands")
def exiter(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    # ends its process with a success code: in the judge's process this exited pytest with 0
    import os

    os._exit(0)


@kernel(supports=SUP, accuracy_model="fp32-split-operands")
def buggy(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return blockattn.block_attention(q, k, v, offsets, block_size=block_size,
                                     scale=scale * 1.01, sinu_pos=sinu_pos, rotate_v=rotate_v)
'''

# The user's own tests: one plain test that checks the plugin left the process alone, one
# written against the `blockattn_case` fixture.
USER_TESTS = '''
import os
import sys


def test_untouched():
    if not any(a.startswith("--blockattn-provider") for a in sys.argv):
        assert "torch" not in sys.modules, "the inert plugin imported torch"
        assert "TRITON_INTERPRET" not in os.environ, "the inert plugin set TRITON_INTERPRET"


def test_mine(blockattn_case):
    assert blockattn_case.passed, blockattn_case.failure_message()
'''

PLAIN = ("edge-lengths-plain-bf16", "sparse-plain-fp16-d128")
CASES = [*PLAIN, "projection-bf16"]  # projection: declared unsupported (no projection callable)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "TRITON_INTERPRET" and not k.startswith(("PYTEST_", "BLOCKATTN_"))}  # fmt: skip
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _pytest(repo: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:benchmark",
           "-o", "addopts=", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=repo, env=_env(), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _out(r: subprocess.CompletedProcess) -> str:
    return f"rc={r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("user_repo")
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "scratchmod.py").write_text(textwrap.dedent(KERNELS))
    (d / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    (d / "early_triton.py").write_text("import triton  # a plugin that imports triton first\n")
    return d


def _case_args(cases: list[str]) -> list[str]:
    return [a for c in cases for a in ("--blockattn-case", c)]


def test_inert_without_the_option(repo: Path) -> None:
    r = _pytest(repo, "-v", "-rs")
    assert r.returncode == 0, _out(r)
    assert "blockattn::" not in r.stdout, _out(r)
    assert "test_user.py::test_untouched PASSED" in r.stdout, _out(r)
    assert "test_user.py::test_mine SKIPPED" in r.stdout, _out(r)
    assert "blockattn_case needs --blockattn-provider" in r.stdout, _out(r)
    assert re.search(r"\b1 passed, 1 skipped\b", r.stdout), _out(r)
    r = _pytest(repo, "--co", "-q")
    assert "2 tests collected" in r.stdout, _out(r)


def test_clean_kernel_passes_with_readable_ids(repo: Path) -> None:
    r = _pytest(repo, "-v", "-rs", "--blockattn-provider", "scratchmod:clean",
                "--blockattn-corpus-only", "--blockattn-variant", "plain",
                "--blockattn-variant", "projection", *_case_args(CASES))  # fmt: skip
    assert r.returncode == 0, _out(r)
    for c in PLAIN:
        assert f"blockattn::test_blockattn[{c}] PASSED" in r.stdout, _out(r)
        assert f"test_user.py::test_mine[{c}] PASSED" in r.stdout, _out(r)
    assert "blockattn::test_blockattn[projection-bf16] SKIPPED" in r.stdout, _out(r)
    assert "clean: declared no projection callable" in r.stdout, _out(r)
    assert "blockattn::test_blockattn_judge PASSED" in r.stdout, _out(r)
    assert "TRITON_INTERPRET=1" in r.stdout or "device=cuda" in r.stdout, _out(r)
    from blockattn.judge.contract import PROPERTIES

    # the contract battery of the kernel under test, one test each: `clean` declares no
    # optional argument (option: unsupported, declared); streams are judged on a GPU only
    skipped = {"option"} | ({"streams"} if "device=cpu" in r.stdout else set())
    for prop in PROPERTIES:
        state = "SKIPPED" if prop in skipped else "PASSED"
        assert f"blockattn::test_blockattn_contract[{prop}] {state}" in r.stdout, _out(r)
    # judge + 7 (CPU) contract properties + 2 plain cases + test_untouched + 3 x test_mine
    # (the fixture does not skip)
    n_pass = 14 + len(PROPERTIES) - 7 - len(skipped)
    assert re.search(rf"\b{n_pass} passed, {1 + len(skipped)} skipped\b", r.stdout), _out(r)


@pytest.mark.slow  # a whole plugin session with the battery: the slow tier (CI time)
def test_fuzz_ids_and_filters(repo: Path) -> None:
    r = _pytest(repo, "--co", "-q", "--blockattn-provider", "scratchmod:clean",
                "--blockattn-fuzz-only", "--blockattn-fuzz", "3", "--blockattn-seed", "5",
                "--blockattn-dtype", "bf16", "test_user.py::test_untouched")  # fmt: skip
    assert r.returncode == 0, _out(r)
    ids = re.findall(r"blockattn::test_blockattn\[(.+?)\]", r.stdout)
    assert len(ids) == 3, _out(r)
    assert all(re.fullmatch(r"fuzz-s5-\d+-\w+-bf16-d(64|128)-\w+?(-bs\d+)?(-offint64)?"
                            r"(-msl(exact|larger))?", i) for i in ids), ids
    r = _pytest(repo, "--co", "-q", "--blockattn-provider", "scratchmod:clean",
                "--blockattn-case", "no-such-case")  # fmt: skip
    assert r.returncode == 4, _out(r)
    assert "--blockattn-case no-such-case: no such case" in r.stderr, _out(r)


@pytest.mark.slow  # a whole plugin session with the battery: the slow tier (CI time)
def test_buggy_kernel_fails_with_a_replay_that_reproduces(repo: Path) -> None:
    case = "edge-lengths-plain-bf16"
    r = _pytest(repo, "-q", "--blockattn-provider", "scratchmod:buggy",
                "--blockattn-corpus-only", "--blockattn-variant", "plain",
                *_case_args([case]), "-k", "blockattn")  # fmt: skip
    assert r.returncode == 1, _out(r)
    assert f"blockattn: {case} (" in r.stdout, _out(r)
    assert re.search(r"buggy O: \d+ elements .* beyond the fp32-split-operands bound",
                     r.stdout), _out(r)  # fmt: skip
    # the case fails, and so do the battery's numbers (layout, block sizes, scale edges,
    # degenerate batches);
    # the judge self-test and the battery's other properties pass (streams: on a GPU only;
    # option: `buggy` declares none, so it is skipped as unsupported)
    n_pass = 6 if __import__("torch").cuda.is_available() else 5
    assert f"5 failed, {n_pass} passed" in r.stdout, _out(r)
    assert "blockattn: contract violated: layout (" in r.stdout, _out(r)
    m = re.search(r"^reproduce: (blockattn replay .+)$", r.stdout, re.M)
    assert m, _out(r)
    argv = shlex.split(m.group(1))
    repro = Path(argv[2])
    # nothing written into the user's repository (issue 21, item 11): pytest's cache, or a
    # temporary directory where the cache provider is off (as here)
    assert repro.is_file() and repo not in repro.parents, argv
    assert not (repo / ".blockattn-repro").exists()
    # The printed command, run from the user's repo (the CLI by this interpreter's -m).
    rr = subprocess.run([sys.executable, "-m", *argv], cwd=repo, env=_env(),
                        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert rr.returncode == 1, _out(rr)
    assert "FAIL" in rr.stdout and "buggy O:" in rr.stdout, _out(rr)


def test_triton_imported_before_the_plugin_is_a_clear_usage_error(repo: Path, device: str) -> None:
    # Without a GPU, a triton imported in compiled mode cannot run the kernels: say so at once
    # instead of failing every case with "Cannot call @triton.jit'd outside of ... a kernel".
    if device == "cuda":
        pytest.skip("the interpreter is only selected without a GPU")
    r = _pytest(repo, "-q", "-p", "early_triton", "--blockattn-provider", "scratchmod:clean")
    assert r.returncode == 4, _out(r)
    assert "imported before the blockattn plugin could set TRITON_INTERPRET=1" in r.stderr, _out(r)


@pytest.mark.slow  # a whole plugin session with the battery: the slow tier (CI time)
def test_a_refusal_its_supports_did_not_declare_fails_not_skips(repo: Path) -> None:
    # issue 21, item 17: the plugin must not turn an undeclared run-time refusal into a skip
    # the plugin's own case item and the user's fixture-based test, no battery
    r = _pytest(repo, "-q", "--blockattn-provider", "scratchmod:refuser",
                "--blockattn-corpus-only", "--blockattn-variant", "plain",
                "--blockattn-no-contract",
                *_case_args(["edge-lengths-plain-bf16"]))  # fmt: skip
    assert r.returncode == 1, _out(r)
    assert "refused at run time" in r.stdout, _out(r)
    assert re.search(r"\b2 failed\b", r.stdout) and "skipped" not in r.stdout, _out(r)


def test_a_kernel_that_exits_fails_its_tests_in_a_worker(repo: Path) -> None:
    """The kernel runs in the plugin's worker process: os._exit(0) there fails the case by name
    (a fresh worker takes the next one); pytest itself exits non-zero."""
    r = _pytest(repo, "-v", "--blockattn-provider", "scratchmod:exiter",
                "--blockattn-corpus-only", "--blockattn-variant", "plain", *_case_args(PLAIN[:1]))
    assert r.returncode == 1, _out(r)
    assert "exited with code 0" in r.stdout, _out(r)
    assert "isolation worker" in r.stdout, _out(r)

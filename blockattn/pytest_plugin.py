"""pytest plugin: judge your own attention kernel with the blockattn suite, from your own repo.

    pytest --blockattn-provider mypkg.attn:block_attention

adds one test per case of the plan that `blockattn run` would select with the same filters
(corpus + a seeded fuzz sample, `blockattn.cases.plan.plan_specs` through `run.resolve_plan`):
`blockattn::test_blockattn[<case name>]`, plus `blockattn::test_blockattn_judge` (the
known-answer self-test of the judge that every `blockattn gate` runs first) and one
`blockattn::test_blockattn_contract[<property>]` per property of the contract battery
(`blockattn/judge/contract.py`; `--blockattn-no-contract` leaves them out). Each case is judged
by `verdict.evaluate` against the tolerance file (default: the newest released one for the
device). A configuration the kernel declares unsupported (`@blockattn.providers.kernel(
supports=...)`) is skipped with the reason; a failing case writes a reproducer and its message
ends with the `blockattn replay ...` command that re-runs it from the same directory.

Without `--blockattn-provider` the plugin does nothing (no tests, no hooks beyond option
parsing, no torch import). With it, on a machine without a GPU it selects the Triton interpreter
(TRITON_INTERPRET=1) in the earliest hook, before conftest files or the kernel module can import
torch or triton: triton imported first stays in compiled mode and every kernel call then fails.

Users who write their own checks can request the fixture `blockattn_case` instead: the test is
parametrised over the same plan and receives a `BlockattnCase` (spec, record, verdict, replay).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# torch-free imports only: this module is imported by every pytest run of an environment
# where blockattn is installed (entry point `pytest11`), before TRITON_INTERPRET is decided.
from blockattn.commands._options import dtype_name, int_at_least
from blockattn.names import DISTRIBUTIONS, VARIANTS

PLUGIN_NAME = "blockattn-session"
MAX_FAILURES_SHOWN = 5


def _cache_dir(config: pytest.Config) -> Path:
    """pytest's cache directory for reproducers (a temporary one with `-p no:cacheprovider`)."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("blockattn-repro")).resolve()
    import tempfile

    return Path(tempfile.mkdtemp(prefix="blockattn-repro-")).resolve()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("blockattn", "blockattn: judge an attention kernel against the FP64 oracle")
    g.addoption("--blockattn-provider", action="append", dest="blockattn_provider", default=None,
                metavar="[NAME=]MODULE:CALLABLE",
                help="kernel to judge (repeatable; the first is under test): a callable with "
                "blockattn.block_attention's signature. Without this option the plugin is off")
    g.addoption("--blockattn-tolerances", dest="blockattn_tolerances", metavar="vN|PATH",
                help="tolerance file (default: the newest released one for this device)")
    g.addoption("--blockattn-allow-unreleased-tolerances", action="store_true",
                dest="blockattn_allow_unreleased_tolerances", default=False,
                help="judge with a tolerance file that is not released (reports say UNRELEASED)")
    g.addoption("--blockattn-baseline-provider", dest="blockattn_baseline", metavar="PROVIDER",
                help="baseline provider run next to it (default fa2 on GPU, eager on CPU)")
    g.addoption("--blockattn-baseline", dest="blockattn_baseline_old", metavar="PROVIDER",
                help="old spelling of --blockattn-baseline-provider (warns)")
    g.addoption("--blockattn-call-timeout", dest="blockattn_call_timeout", type=float,
                default=None, metavar="SECONDS",
                help="watchdog of each call into the kernel's worker process (a call past it "
                "fails its test; default 900)")
    g.addoption("--blockattn-in-process", action="store_true", dest="blockattn_in_process",
                default=False, help="debugging only: call the kernel in pytest's own process "
                "(results are NOT ISOLATED)")
    g.addoption("--blockattn-dtype", action="append", dest="blockattn_dtype", type=dtype_name,
                help="only cases of this dtype (repeatable)")
    g.addoption("--blockattn-head-dim", action="append", dest="blockattn_head_dim",
                type=int_at_least(1), help="only cases of this head dim (repeatable)")
    g.addoption("--blockattn-variant", action="append", dest="blockattn_variant",
                choices=VARIANTS, help="only cases of this variant (repeatable)")
    g.addoption("--blockattn-distribution", action="append", dest="blockattn_distribution",
                choices=DISTRIBUTIONS, help="only cases of this input distribution (repeatable)")
    g.addoption("--blockattn-case", action="append", dest="blockattn_case", metavar="ID",
                help="only this case: a case id or a corpus/fuzz case name (repeatable)")
    g.addoption("--blockattn-fuzz", dest="blockattn_fuzz", type=int_at_least(0), metavar="N",
                help="fuzz cases (default per profile: 8 for ci, 60 for gpu)")
    g.addoption("--blockattn-seed", dest="blockattn_seed", type=int_at_least(0), default=0,
                help="fuzz sampler seed (default 0)")
    g.addoption("--blockattn-profile", dest="blockattn_profile", choices=("ci", "gpu", "nightly"),
                help="fuzz space and size (default: ci on CPU, gpu on CUDA)")
    g.addoption("--blockattn-corpus-only", action="store_true", dest="blockattn_corpus_only",
                help="no fuzz cases")
    g.addoption("--blockattn-fuzz-only", action="store_true", dest="blockattn_fuzz_only",
                help="no corpus cases")
    g.addoption("--blockattn-repro-dir", dest="blockattn_repro_dir", metavar="DIR",
                help="where failing cases write reproducers (default: pytest's cache "
                     "directory, .pytest_cache/d/blockattn-repro)")
    g.addoption("--blockattn-no-contract", action="store_true", dest="blockattn_no_contract",
                help="skip the contract battery's tests (test_blockattn_contract[...])")


def _old_baseline(name: str | None) -> str | None:
    if name is not None:
        import warnings

        warnings.warn(f"--blockattn-baseline {name} is now --blockattn-baseline-provider {name} "
                      "(--baseline names a report directory on gate and mutants)",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
    return name


def _active(config_or_ns: Any) -> bool:
    ns = getattr(config_or_ns, "known_args_namespace", None) or getattr(
        config_or_ns, "option", config_or_ns
    )
    return bool(getattr(ns, "blockattn_provider", None))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: Any) -> None:
    # Before any conftest (or a plugin-loaded module) can import torch/triton.
    if _active(early_config):
        setup_environment()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not _active(config):
        return
    device = setup_environment()  # idempotent; covers runs where the early hook did not fire
    config.addinivalue_line("markers", "blockattn: a case of the blockattn verification suite")
    config.pluginmanager.register(BlockattnSession(config, device), PLUGIN_NAME)


_DEVICE: str | None = None


def setup_environment() -> str:
    """Pin the xdist worker's GPU and select the Triton interpreter without a GPU ('cpu'|'cuda').

    No GPU visible (nvidia-smi / CUDA_VISIBLE_DEVICES, read without importing torch): set
    TRITON_INTERPRET=1 *before* torch is imported, then let `env.configure()` decide for good.
    """
    global _DEVICE
    if _DEVICE is not None:
        return _DEVICE
    from blockattn.run import env  # torch-free module; blockattn/__init__ is lazy

    late = False
    if "TRITON_INTERPRET" not in os.environ and not env._visible_gpu_ids():
        late = "triton" in sys.modules  # imported in compiled mode: setting it now is too late
        os.environ["TRITON_INTERPRET"] = "1"
    device = env.configure()
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise pytest.UsageError(
            "blockattn: no CUDA device, but TRITON_INTERPRET is set to "
            f"{os.environ.get('TRITON_INTERPRET')!r}: the kernels can only run under the Triton "
            "interpreter here; unset it or set TRITON_INTERPRET=1"
        )
    if device == "cpu" and (late or _triton_frozen_compiled()):
        raise pytest.UsageError(
            "blockattn: no CUDA device and triton (or the blockattn kernels) was imported before "
            "the blockattn plugin could set TRITON_INTERPRET=1 (by another plugin?): run with "
            "TRITON_INTERPRET=1 in the environment"
        )
    _DEVICE = device
    return device


def _triton_frozen_compiled() -> bool:
    att = sys.modules.get("blockattn.kernels.attention")
    return att is not None and not getattr(att, "INTERPRET", True)


# ------------------------------------------------------------------------------------------
# The plan and the judging of one case


@dataclass
class BlockattnCase:
    """One judged case: what `blockattn_case` gives a user's test, and what the plugin's own
    tests assert on."""

    spec: Any  # blockattn.cases.spec.CaseSpec
    record: dict[str, Any] | None = None  # the results.jsonl record (None: skipped before running)
    verdict: Any = None  # blockattn.judge.verdict.Verdict
    skip_reason: str | None = None  # declared unsupported by the kernel under test
    replay: str | None = None  # `blockattn replay ...` (failures only)

    @property
    def passed(self) -> bool:
        return self.verdict is None or self.verdict.passed

    @property
    def failures(self) -> list[str]:
        return [] if self.verdict is None else list(self.verdict.failures)

    def failure_message(self) -> str:
        spec = self.spec
        fails = self.failures
        lines = [
            f"blockattn: {case_label(spec)} ({spec.case_id}) FAILED: {spec.short()}",
            *(f"  - {f}" for f in fails[:MAX_FAILURES_SHOWN]),
        ]
        if len(fails) > MAX_FAILURES_SHOWN:
            lines.append(f"  ... and {len(fails) - MAX_FAILURES_SHOWN} more")
        if self.replay:
            lines.append(f"reproduce: {self.replay}")
        return "\n".join(lines)


def case_label(spec: Any) -> str:
    return spec.name or spec.case_id


@dataclass
class Plan:
    device: str
    under_test: str
    baseline: str
    providers: list[str]
    profile: str
    specs: list[Any]
    tol: Any  # blockattn.judge.tolerances.Tolerances
    repro_dir: Path
    labels: list[str] = field(default_factory=list)


class BlockattnSession:
    """The plugin's state for one pytest session; registered only with --blockattn-provider."""

    def __init__(self, config: pytest.Config, device: str) -> None:
        self.config = config
        self.device = device
        self._plan: Plan | None = None
        # One worker per test session (per xdist worker): the kernel runs there, never in this
        # process. The user's conftest state (torch flags, environment changes made after
        # start-up, monkeypatches) does not reach it: `blockattn_worker_init` does (docs).
        from blockattn.run import isolated

        self.sandbox = isolated.open_session(config.getoption("blockattn_call_timeout"),
                                             config.getoption("blockattn_in_process"),
                                             prestart=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from blockattn.run import isolated

        isolated.close_session(self.sandbox)

    # -- plan ------------------------------------------------------------------------------
    def namespace(self) -> argparse.Namespace:
        """The options as `blockattn run` would have parsed them (for `resolve_plan`)."""
        o = self.config.getoption
        if o("blockattn_corpus_only") and o("blockattn_fuzz_only"):
            raise pytest.UsageError("--blockattn-corpus-only and --blockattn-fuzz-only: pick one")
        tol = o("blockattn_tolerances")
        if tol is not None:
            from blockattn.judge.tolerances import resolve_path

            tol = resolve_path(tol)
        return argparse.Namespace(
            provider=o("blockattn_provider"), under_test=None, providers=None,
            baseline=o("blockattn_baseline") or _old_baseline(o("blockattn_baseline_old")),
            profile=o("blockattn_profile"),
            fuzz=o("blockattn_fuzz"), seed=o("blockattn_seed"), max_cases=None,
            corpus_only=o("blockattn_corpus_only"), fuzz_only=o("blockattn_fuzz_only"),
            shape_p=False, dtype=o("blockattn_dtype"), head_dim=o("blockattn_head_dim"),
            variant=o("blockattn_variant"), distribution=o("blockattn_distribution"),
            case=o("blockattn_case"), shard=None, tolerances=tol, no_tolerances=False,
            allow_unreleased_tolerances=o("blockattn_allow_unreleased_tolerances"),
        )  # fmt: skip

    def plan(self) -> Plan:
        if self._plan is None:
            from blockattn.commands._options import load_tolerances
            from blockattn.commands.run import resolve_plan

            ns = self.namespace()
            try:
                tol = load_tolerances(ns, self.device)
                ut, bl, provs, profile, specs = resolve_plan(ns, self.device)
            except (ValueError, OSError) as exc:  # bad spec, filter, file: a usage error
                raise pytest.UsageError(f"blockattn: {_our_option_names(str(exc))}") from exc
            if not specs:
                raise pytest.UsageError(
                    f"blockattn: the --blockattn-* filters select no case of the plan (under "
                    f"test {ut}, profile {profile}, device {self.device})"
                )
            d = self.config.getoption("blockattn_repro_dir")
            if d is not None:
                repro = Path(self.config.invocation_params.dir, d).resolve()
            else:  # not in the user's working tree: pytest's own cache (git-ignored there)
                repro = _cache_dir(self.config)
            plan = Plan(self.device, ut, bl, provs, profile, specs, tol, repro)
            seen: set[str] = set()
            for s in specs:
                label = case_label(s)
                if label in seen:
                    label = f"{label}-{s.case_id}"
                seen.add(label)
                plan.labels.append(label)
            self._plan = plan
        return self._plan

    def judge(self, spec: Any) -> BlockattnCase:
        """Run one case like `blockattn run`/`gate` do and judge it by the same verdict."""
        from blockattn import providers
        from blockattn.judge import verdict
        from blockattn.judge.evaluate import evaluate_case
        from blockattn.pipeline import write_reproducer
        from blockattn.run.execute import device_info

        p = self.plan()
        why = providers.get(p.under_test).supports.refusal(
            spec, p.device, device_info()["arch"], spec.block_size
        )
        if why is not None:  # declared unsupported: no oracle work, a skip
            return BlockattnCase(spec, skip_reason=f"{p.under_test}: {why}")
        rec = evaluate_case(spec, p.providers, p.under_test, p.baseline, tol=p.tol)
        v = verdict.evaluate(rec, p.tol, p.under_test)
        for line in self.tampered():  # the kernel wrote the judge's files: this case fails
            v.fail(line)
        rec["verdict"] = {"passed": v.passed, "skipped": v.skipped, "failures": v.failures,
                          "warnings": v.warnings, "tolerances": f"v{p.tol.version}"}  # fmt: skip
        case = BlockattnCase(spec, rec, v)
        if v.passed and v.skipped:
            res = rec["providers"].get(p.under_test) or {}
            case.skip_reason = str(res.get("reason") or "unsupported")
        if not v.passed:
            try:
                case.replay = write_reproducer(p.repro_dir, rec, v.failures, str(p.tol.path))
            except OSError as exc:
                case.replay = f"(could not write the reproducer: {exc})"
            rec["verdict"]["replay"] = case.replay
        return case

    def tampered(self) -> list[str]:
        """The judge's files changed since the session began (run/judge_files.py): checked
        after every case and the battery, since a session's worker lives on between tests."""
        from blockattn.run import judge_files

        return judge_files.lines(self.sandbox.files)

    def contract(self) -> tuple[list[Any], str]:
        """(checks, replay command) of the contract battery, run once per session."""
        if getattr(self, "_contract", None) is None:
            from blockattn.commands.contract import run_for

            p = self.plan()
            checks, _, replay = run_for(p.under_test, p.tol, p.device, str(p.tol.path))
            self._contract = (checks, replay)
        return self._contract

    # -- hooks -----------------------------------------------------------------------------
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [
            f"blockattn plugin: device={self.device} "
            f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '<unset>')} "
            f"providers {config.getoption('blockattn_provider')} "
            f"isolation {self.sandbox.mode()}"
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "blockattn_case" in metafunc.fixturenames:
            p = self.plan()
            metafunc.parametrize("blockattn_case", p.specs, ids=p.labels, indirect=True)

    @pytest.hookimpl(tryfirst=True)  # before -k/-m deselection and --lf filtering
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        self.plan()  # a bad option or spec: pytest's usage error (exit 4), before any test
        suite = BlockattnSuite.from_parent(session, name="blockattn", nodeid="blockattn")
        suite.state = self
        items.extend(session.genitems(suite))  # reports the collection like any other


_CLI_OPTIONS = re.compile(
    r"(?<![\w-])--(provider|case|dtype|head-dim|variant|distribution|fuzz-only|fuzz|seed|"
    r"profile|corpus-only|baseline|tolerances)\b"
)


def _our_option_names(msg: str) -> str:
    """`blockattn run`'s messages name its options; name the plugin's instead."""
    return _CLI_OPTIONS.sub(r"--blockattn-\1", msg)


class BlockattnSuite(pytest.Collector):
    state: BlockattnSession

    def collect(self) -> list[pytest.Item]:
        p = self.state.plan()
        items: list[pytest.Item] = [JudgeSelfTest.from_parent(self, name="test_blockattn_judge")]
        if not self.state.config.getoption("blockattn_no_contract"):
            from blockattn.judge.contract import PROPERTIES

            for prop in PROPERTIES:
                it = ContractItem.from_parent(self, name=f"test_blockattn_contract[{prop}]")
                it.prop = prop
                it.add_marker("blockattn")
                items.append(it)
        for spec, label in zip(p.specs, p.labels, strict=True):
            it = BlockattnItem.from_parent(self, name=f"test_blockattn[{label}]")
            it.spec = spec
            it.add_marker("blockattn")
            items.append(it)
        items[0].add_marker("blockattn")
        return items

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, "blockattn"


class _BlockattnFailure(Exception):
    pass


class _Item(pytest.Item):
    @property
    def state(self) -> BlockattnSession:
        return self.parent.state  # type: ignore[attr-defined]

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> Any:
        if isinstance(excinfo.value, _BlockattnFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


class BlockattnItem(_Item):
    spec: Any

    def runtest(self) -> None:
        case = self.state.judge(self.spec)
        self.user_properties.append(("blockattn_case_id", self.spec.case_id))
        if case.skip_reason is not None:
            pytest.skip(case.skip_reason)
        if not case.passed:
            raise _BlockattnFailure(case.failure_message())


class ContractItem(_Item):
    """One property of the contract battery (`blockattn/judge/contract.py`) of the kernel under
    test; the battery runs once per session."""

    prop: str

    def runtest(self) -> None:
        checks, replay = self.state.contract()
        mine = [c for c in checks if c.prop in (self.prop, "all")]
        bad = [c for c in mine if c.status == "FAIL"]
        tampered = self.state.tampered()
        if tampered:
            raise _BlockattnFailure("\n".join(f"blockattn: {x}" for x in tampered))
        if bad:
            raise _BlockattnFailure("\n".join([
                f"blockattn: contract violated: {self.prop} ({len(bad)} of {len(mine)} checks)",
                *(f"  - {c.probe}: {c.detail}" for c in bad[:MAX_FAILURES_SHOWN]),
                f"reproduce: {replay}",
            ]))  # fmt: skip
        if not mine or all(c.status == "unsupported" for c in mine):
            why = "; ".join(sorted({c.detail for c in mine})) or "no probe of this property"
            pytest.skip(f"unsupported (declared): {why}")


class JudgeSelfTest(_Item):
    """Known-answer tests of the judge (`blockattn/judge/selftest.py`), as `gate` runs them."""

    def runtest(self) -> None:
        from blockattn.judge.selftest import run_selftest

        p = self.state.plan()
        problems = run_selftest(p.tol, p.under_test, p.device)
        if problems:
            raise _BlockattnFailure(
                f"blockattn: the judge fails its known-answer tests under {p.tol.path} "
                "(no verdict of this session can be trusted):\n"
                + "\n".join(f"  - {x}" for x in problems)
            )


@pytest.fixture
def blockattn_case(request: pytest.FixtureRequest) -> BlockattnCase:
    """One case of the blockattn plan, run and judged (it does not fail by itself).

    The requesting test is parametrised over the plan of `--blockattn-*` options; without
    `--blockattn-provider` it is skipped.
    """
    state = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if state is None or not hasattr(request, "param"):
        pytest.skip("blockattn_case needs --blockattn-provider MODULE:CALLABLE")
    return state.judge(request.param)

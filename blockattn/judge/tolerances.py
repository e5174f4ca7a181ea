"""Tolerance files (blockattn/tolerances/vN.toml): schema, lookup, manifest of released files.

Layout (see blockattn/tolerances/SCHEMA.md for the prose version):

    schema_version = 1
    version = 1                      # must equal N in the file name vN.toml
    status = "released"              # or "proposed" (calibrate output not yet released)
    under_test = "blockattn"         # provider the gate judges
    baseline = "eager"               # baseline max_ratio_to_baseline was calibrated against
    [provenance]                     # generator, commit, device, gpu, date, method (+ loosening)
    [regression]                     # max_growth, min_ratio_to_floor (for --baseline diffs)
    [rules.<provider>.<dtype>.<tensor>]
    max_ratio_to_floor = 24.0        # required
    max_ratio_to_baseline = 3.0      # optional
    atol_floor = 1e-6                # optional
    min_snr_db = 30.0                # optional
    max_pct_over_tol = 5.0           # optional
    [rules.<provider>.<dtype>.<tensor>.dist.<distribution>]  # optional, ill-conditioned inputs
    [rules.<provider>.<dtype>.<tensor>.arch.<arch>]   # optional per-GPU-arch override, e.g. sm_90
"""

from __future__ import annotations

import argparse
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blockattn.names import DISTRIBUTIONS as DISTRIBUTION_NAMES
from blockattn.names import DTYPE_NAMES

SCHEMA_VERSION = 2  # written by this code; 1 (whole-tensor bounds) is still read
SCHEMA_VERSIONS = (1, 2)
TENSORS = ("O", "dQ", "dK", "dV", "dX", "dW", "dbias")
RULE_FIELDS: dict[str, tuple[bool, float | None, float | None]] = {
    # name: (required, min exclusive-ish lower bound, upper bound)
    "max_ratio_to_floor": (True, 0.0, None),
    "max_ratio_to_baseline": (False, 0.0, None),
    "atol_floor": (False, 0.0, None),
    "min_snr_db": (False, None, None),
    "max_pct_over_tol": (False, -1e-12, 100.0),
}
PROVENANCE_REQUIRED = ("generator", "commit", "device", "gpu", "date", "method")
TOP_REQUIRED = (
    "schema_version",
    "version",
    "status",
    "under_test",
    "baseline",
    "provenance",
    "rules",
)
TOP_ALLOWED = {*TOP_REQUIRED, "regression", "description"}
TOP2_REQUIRED = (*TOP_REQUIRED, "models", "regression")
REGRESSION_DEFAULTS = {"max_growth": 1.25, "min_ratio_to_floor": 2.0}
# Schema 2: elementwise regression vs a baseline report (ERROR_ANALYSIS.md §6). Every field is
# required and carries its reason in the file: nothing here defaults silently.
REGRESSION2_FIELDS = (
    "not_cr_growth",  # % not correctly rounded may grow by this factor ...
    "not_cr_slack_pct",  # ... plus this many percentage points
    "p50_growth",  # median ulp error may grow by this factor ...
    "p50_slack_ulp",  # ... plus this many ulps
    "p9999_growth",  # p99.99 ulp error may grow by this factor ...
    "p9999_slack_ulp",  # ... plus this many ulps
    "not_cr_slack_min_elems",  # ... but at least this many elements
    "max_new_violations",  # elements beyond the model's bound may grow by this count
)
RULE2_FIELDS = ("model", "max_violations", "reason")
MANIFEST_NAME = "MANIFEST"


class ToleranceError(ValueError):
    """Malformed tolerance file: a configuration error (CLI exit code 2)."""


@dataclass
class Tolerances:
    path: Path | None
    data: dict[str, Any]
    sha256: str = ""
    rules: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return int(self.data["version"])

    @property
    def released_as(self) -> str | None:
        """The shipped file these bytes are (by sha256, in the installed package's own
        MANIFEST), else None: a file is released by its bytes, never by its folder or name."""
        return released_name(self.sha256)

    @property
    def label(self) -> str:
        """How reports name it: "v4, released (v4.toml)" or "v4, UNRELEASED (sha256 ...)"."""
        name = self.released_as
        if name is not None:
            return f"v{self.version}, released ({name})"
        return (f"v{self.version}, UNRELEASED (sha256 {self.sha256[:12]} is not in the "
                "package's MANIFEST)")  # fmt: skip

    @property
    def under_test(self) -> str:
        return str(self.data["under_test"])

    @property
    def baseline(self) -> str:
        return str(self.data["baseline"])

    @property
    def regression(self) -> dict[str, float]:
        return {**REGRESSION_DEFAULTS, **self.data.get("regression", {})}

    def rule(  # schema 1 only
        self,
        provider: str,
        dtype: str,
        tensor: str,
        arch: str | None,
        distribution: str | None = None,
    ) -> dict | None:
        """Base rule, overridden by .dist.<distribution>, then by .arch.<arch>."""
        base = self.rules.get(provider, {}).get(dtype, {}).get(tensor)
        if base is None:
            return None
        merged = {k: v for k, v in base.items() if k not in ("arch", "dist")}
        if distribution is not None:
            merged.update(base.get("dist", {}).get(distribution, {}))
        if arch is not None:
            merged.update(base.get("arch", {}).get(arch, {}))
        return merged

    def overrides(
        self, provider: str, dtype: str, tensor: str, arch: str | None, distribution: str | None
    ) -> list[str]:
        """Which overrides `rule` applied, in order (named in the verdict's messages)."""
        base = self.rules.get(provider, {}).get(dtype, {}).get(tensor) or {}
        out = []
        if distribution is not None and distribution in base.get("dist", {}):
            out.append(f"dist.{distribution}")
        if arch is not None and arch in base.get("arch", {}):
            out.append(f"arch.{arch}")
        return out

    def providers(self) -> list[str]:
        return sorted(self.rules)

    @property
    def schema(self) -> int:
        return int(self.data["schema_version"])

    def rule_for(
        self, provider: str, declared: str | None = None, reference: str | None = None
    ) -> tuple[dict[str, Any] | None, str]:
        """(schema-2 rule, where it comes from) for `provider`; (None, why) when none applies.

        In order: the file's own rule for the provider's name; for a provider the file does not
        name (an outside kernel), the accuracy model it declares, held to 0 violations like every
        kernel under test; else the rule of the reference provider it names. No silent default.
        """
        if self.schema < 2:
            return None, f"schema-1 tolerances v{self.version} judge only the providers they name"
        if provider in self.rules:
            return self.rules[provider], f"rules.{provider}"
        models = self.data["models"]
        if declared is not None:
            if declared not in models:
                return None, (f"declares accuracy model {declared!r}, which tolerances "
                              f"v{self.version} does not define (models: {sorted(models)})")
            return {
                "model": declared,
                "max_violations": 0,
                "reason": f"accuracy model {declared!r} declared by the provider; 0 violations, "
                "as for every kernel under test (ERROR_ANALYSIS.md §3-4)",
            }, f"declared model {declared}"
        if reference is not None:
            if reference not in self.rules:
                return None, (f"names reference provider {reference!r}, which tolerances "
                              f"v{self.version} has no rule for")
            return self.rules[reference], f"reference {reference} (rules.{reference})"
        return None, (f"no rule for provider {provider!r} in tolerances v{self.version}, and it "
                      "declares no accuracy model or reference provider")

    def model_for(
        self, provider: str, declared: str | None = None, reference: str | None = None
    ):  # -> blockattn.bounds.models.Model | None
        """The accuracy model a schema-2 file judges `provider` by (None: no rule applies)."""
        from blockattn.bounds import models as _models

        rule, _ = self.rule_for(provider, declared, reference)
        if rule is None:
            return None
        name = rule["model"]
        return _models.parse(name, self.data["models"][name], f"models.{name}")


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check_rule(where: str, rule: Any, allow_arch: bool) -> None:
    if not isinstance(rule, dict):
        raise ToleranceError(f"{where}: expected a table")
    for key, val in rule.items():
        if key in ("arch", "dist") and allow_arch:
            if not isinstance(val, dict):
                raise ToleranceError(f"{where}.{key}: expected a table of {key} names")
            for name, sub in val.items():
                if key == "dist" and name not in DISTRIBUTION_NAMES:
                    raise ToleranceError(f"{where}.dist: unknown distribution {name!r}")
                _check_rule(f"{where}.{key}.{name}", sub, allow_arch=False)
                if not sub:
                    raise ToleranceError(f"{where}.{key}.{name}: empty override")
            continue
        if key not in RULE_FIELDS:
            raise ToleranceError(f"{where}: unknown field {key!r} (allowed: {sorted(RULE_FIELDS)})")
        _, lo, hi = RULE_FIELDS[key]
        if not _num(val):
            raise ToleranceError(f"{where}.{key}: expected a number, got {val!r}")
        if lo is not None and not val > lo:
            raise ToleranceError(f"{where}.{key}: must be > {lo}, got {val}")
        if hi is not None and val > hi:
            raise ToleranceError(f"{where}.{key}: must be <= {hi}, got {val}")
    if allow_arch and "max_ratio_to_floor" not in rule:
        raise ToleranceError(f"{where}: missing required field 'max_ratio_to_floor'")


def validate(data: dict[str, Any], path: Path | None = None) -> None:
    src = str(path) if path else "<tolerances>"
    if data.get("schema_version") == 2:
        return _validate_v2(data, src, path)
    if data.get("schema_version") not in SCHEMA_VERSIONS:
        raise ToleranceError(
            f"{src}: schema_version {data.get('schema_version')!r} not in {SCHEMA_VERSIONS}"
        )
    _validate_common(data, src, path, TOP_REQUIRED)
    unknown = set(data) - TOP_ALLOWED
    if unknown:
        raise ToleranceError(f"{src}: unknown top-level keys {sorted(unknown)}")
    reg = data.get("regression", {})
    if not isinstance(reg, dict) or set(reg) - set(REGRESSION_DEFAULTS):
        raise ToleranceError(f"{src}: [regression] allows only {sorted(REGRESSION_DEFAULTS)}")
    for k, v in reg.items():
        if not _num(v) or v <= 0:
            raise ToleranceError(f"{src}: regression.{k} must be a positive number")
    rules = data["rules"]
    for prov_name, by_dtype in rules.items():
        if not isinstance(by_dtype, dict):
            raise ToleranceError(f"{src}: rules.{prov_name} must be a table")
        for dt, by_tensor in by_dtype.items():
            if dt not in DTYPE_NAMES:
                raise ToleranceError(f"{src}: rules.{prov_name}: unknown dtype {dt!r}")
            if not isinstance(by_tensor, dict):
                raise ToleranceError(f"{src}: rules.{prov_name}.{dt} must be a table")
            for tn, rule in by_tensor.items():
                if tn not in TENSORS:
                    raise ToleranceError(f"{src}: rules.{prov_name}.{dt}: unknown tensor {tn!r}")
                _check_rule(f"rules.{prov_name}.{dt}.{tn}", rule, allow_arch=True)


def _validate_common(data: dict[str, Any], src: str, path: Path | None, required: tuple) -> None:
    missing = [k for k in required if k not in data]
    if missing:
        raise ToleranceError(f"{src}: missing top-level keys {missing}")
    if not isinstance(data["version"], int) or data["version"] < 1:
        raise ToleranceError(f"{src}: version must be a positive integer")
    if path is not None:
        m = re.fullmatch(r"v(\d+)", path.stem)
        if m and int(m.group(1)) != data["version"]:
            raise ToleranceError(f"{src}: version {data['version']} does not match file name")
    if data["status"] not in ("released", "proposed"):
        raise ToleranceError(f"{src}: status must be 'released' or 'proposed'")
    prov = data["provenance"]
    if not isinstance(prov, dict):
        raise ToleranceError(f"{src}: [provenance] must be a table")
    pm = [k for k in PROVENANCE_REQUIRED if not isinstance(prov.get(k), str) or not prov.get(k)]
    if pm:
        raise ToleranceError(f"{src}: [provenance] needs non-empty strings for {pm}")
    rules = data["rules"]
    if not isinstance(rules, dict) or not rules:
        raise ToleranceError(f"{src}: [rules] must be a non-empty table")
    if data["under_test"] not in rules:
        raise ToleranceError(f"{src}: no rules for the provider under test {data['under_test']!r}")


def _validate_v2(data: dict[str, Any], src: str, path: Path | None) -> None:
    """Schema 2: accuracy models + per-provider elementwise rules (tolerances/SCHEMA.md)."""
    from blockattn.bounds import models as _models

    _validate_common(data, src, path, TOP2_REQUIRED)
    unknown = set(data) - {*TOP2_REQUIRED, "description"}
    if unknown:
        raise ToleranceError(f"{src}: unknown top-level keys {sorted(unknown)}")
    mods = data["models"]
    if not isinstance(mods, dict) or not mods:
        raise ToleranceError(f"{src}: [models] must be a non-empty table")
    for name, m in mods.items():
        _models.parse(name, m, f"{src}: models.{name}")  # ModelError is a ValueError
    reg = data["regression"]
    if not isinstance(reg, dict):
        raise ToleranceError(f"{src}: [regression] must be a table")
    miss = [k for k in REGRESSION2_FIELDS if k not in reg]
    extra = set(reg) - {*REGRESSION2_FIELDS, "reason"}
    if miss or extra:
        raise ToleranceError(
            f"{src}: [regression] needs exactly {list(REGRESSION2_FIELDS)} and 'reason'"
            + (f"; missing {miss}" if miss else "")
            + (f"; unknown {sorted(extra)}" if extra else "")
        )
    if not isinstance(reg.get("reason"), str) or not reg["reason"].strip():
        raise ToleranceError(f"{src}: regression.reason: required, a non-empty string")
    for k in REGRESSION2_FIELDS:
        if not _num(reg[k]) or reg[k] < 0:
            raise ToleranceError(f"{src}: regression.{k} must be a number >= 0")
    if reg["not_cr_growth"] < 1 or reg["p9999_growth"] < 1 or reg["p50_growth"] < 1:
        raise ToleranceError(f"{src}: regression growth factors must be >= 1")
    rules = data["rules"]
    for prov_name, rule in rules.items():
        where = f"{src}: rules.{prov_name}"
        if not isinstance(rule, dict):
            raise ToleranceError(f"{where} must be a table")
        miss = [k for k in RULE2_FIELDS if k not in rule]
        extra = set(rule) - set(RULE2_FIELDS)
        if miss or extra:
            raise ToleranceError(
                f"{where}: needs exactly {list(RULE2_FIELDS)}"
                + (f"; missing {miss}" if miss else "")
            + (f"; unknown {sorted(extra)}" if extra else "")
            )
        if rule["model"] not in mods:
            raise ToleranceError(f"{where}.model: {rule['model']!r} is not in [models]")
        mv = rule["max_violations"]
        if isinstance(mv, bool) or not isinstance(mv, int) or mv < 0:
            raise ToleranceError(f"{where}.max_violations must be an int >= 0")
        if not isinstance(rule["reason"], str) or not rule["reason"].strip():
            raise ToleranceError(f"{where}.reason: required, a non-empty string")


def load(path: str | Path) -> Tolerances:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"tolerance file not found: {p}")
    raw = p.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ToleranceError(f"{p}: not valid TOML: {exc}") from exc
    validate(data, p)
    return Tolerances(p, data, hashlib.sha256(raw).hexdigest(), data["rules"])


# ---- manifest of released files (immutability) ------------------------------------------------


def read_manifest(tol_dir: str | Path) -> dict[str, str]:
    """MANIFEST lines: '<sha256>  <file name>' (sha256sum format, so `sha256sum -c` works)."""
    p = Path(tol_dir) / MANIFEST_NAME
    if not p.exists():
        return {}
    out = {}
    for line in p.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sha, name = line.split(maxsplit=1)
        out[name.strip()] = sha
    return out


def released_name(sha256: str) -> str | None:
    """The name of the shipped, released file with these bytes (None: not released)."""
    for name, sha in read_manifest(default_tolerance_dir()).items():
        if sha == sha256:
            return name
    return None


ALLOW_UNRELEASED = "--allow-unreleased-tolerances"


def require_released(tol: Tolerances, allow: bool) -> None:
    """Fail closed on a file the package cannot vouch for: its bytes must be a released file's
    (a byte-identical copy anywhere is that release); any other file needs `allow`."""
    problems = check_manifest(default_tolerance_dir())
    if problems:
        raise ToleranceError("; ".join(problems))
    if tol.released_as is None and not allow:
        raise ToleranceError(
            f"tolerance file {tol.path} is not released: sha256 {tol.sha256[:12]} is in no "
            f"MANIFEST entry of the installed package ({default_tolerance_dir()}). Judge with a "
            f"released file (v4, v5), or pass {ALLOW_UNRELEASED} to use this one anyway; the "
            "reports then say UNRELEASED"
        )


def check_manifest(tol_dir: str | Path) -> list[str]:
    """Problems with released files: changed bytes, missing files, or status != released."""
    problems = []
    for name, sha in read_manifest(tol_dir).items():
        f = Path(tol_dir) / name
        if not f.exists():
            problems.append(f"{name}: listed in MANIFEST but missing")
            continue
        actual = hashlib.sha256(f.read_bytes()).hexdigest()
        if actual != sha:
            problems.append(
                f"{name}: released file changed (sha256 {actual[:12]} != manifest {sha[:12]}); "
                "released tolerances are immutable - add a new vN+1 instead"
            )
    return problems


def release(path: str | Path) -> str:
    """Append a file to its directory's MANIFEST (refuses if already released)."""
    p = Path(path)
    tol = load(p)
    if tol.data["status"] != "released":
        raise ToleranceError(f'{p}: set status = "released" before releasing')
    manifest = read_manifest(p.parent)
    if p.name in manifest:
        raise ToleranceError(f"{p.name} is already released")
    with open(p.parent / MANIFEST_NAME, "a") as fh:
        fh.write(f"{tol.sha256}  {p.name}\n")
    return tol.sha256


def latest_released(tol_dir: str | Path, device: str | None = None) -> Path | None:
    """Newest released vN.toml; with `device` ("cpu" | "cuda"), the newest calibrated there.

    Bounds calibrated on the CPU interpreter and on a GPU measure different pipelines (and
    different baselines: eager vs FA v2), so a run is judged by a file from its own device.
    """
    names = read_manifest(tol_dir)
    ver = sorted(
        ((int(m.group(1)), n) for n in names if (m := re.fullmatch(r"v(\d+)\.toml", n))),
        reverse=True,
    )
    for _, name in ver:
        path = Path(tol_dir) / name
        if device is None:
            return path
        with path.open("rb") as f:
            if tomllib.load(f).get("provenance", {}).get("device") == device:
                return path
    return None


def default_tolerance_dir() -> Path:
    """The released files ship inside the package (package data), so an installed wheel has them."""
    return Path(__file__).resolve().parents[1] / "tolerances"


class UnknownVersion(argparse.ArgumentTypeError, ValueError):
    """`--tolerances vN` naming no shipped file (argparse shows its message; exit 2)."""


def shipped_versions() -> str:
    """The shipped files, newest first: 'v5 (released, cuda), v4 (released, cpu), v3 (...)'."""
    out = []
    files = sorted(default_tolerance_dir().glob("v*.toml"),
                   key=lambda f: int(re.sub(r"\D", "", f.stem) or 0), reverse=True)  # fmt: skip
    for f in files:
        try:
            with open(f, "rb") as fh:
                doc = tomllib.load(fh)
            released = released_name(hashlib.sha256(f.read_bytes()).hexdigest()) is not None
            dev = doc.get("provenance", {}).get("device")
            out.append(f"{f.stem} ({'released' if released else doc.get('status', '?')}, {dev})")
        except (OSError, tomllib.TOMLDecodeError):
            out.append(f"{f.stem} (unreadable)")
    return ", ".join(out)


def resolve_path(arg: str | Path) -> Path:
    """A tolerance file argument: a path, or a bare version name ('v5') of a shipped file; a
    version that is not shipped is refused with the list of those that are."""
    p = Path(arg)
    if not p.exists() and re.fullmatch(r"v\d+(\.toml)?", str(arg)):
        shipped = default_tolerance_dir() / (p.stem + ".toml")
        if not shipped.is_file():
            raise UnknownVersion(f"no tolerance file {p.stem} ships with blockattn; shipped: "
                                 f"{shipped_versions()} (or give a file path)")  # fmt: skip
        return shipped
    return p

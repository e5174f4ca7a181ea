"""Tolerance files (tolerances/vN.toml): schema validation, lookup, manifest of released files.

Layout (see tolerances/SCHEMA.md for the prose version):

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

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
TENSORS = ("O", "dQ", "dK", "dV", "dX", "dW", "dbias")
DTYPE_NAMES = ("bfloat16", "float16", "float32")
DISTRIBUTION_NAMES = (
    "normal",
    "scaled_logits",
    "heavy_tailed",
    "tiny",
    "near_constant",
    "negative_rows",
)
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
REGRESSION_DEFAULTS = {"max_growth": 1.25, "min_ratio_to_floor": 2.0}
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
    def under_test(self) -> str:
        return str(self.data["under_test"])

    @property
    def baseline(self) -> str:
        return str(self.data["baseline"])

    @property
    def regression(self) -> dict[str, float]:
        return {**REGRESSION_DEFAULTS, **self.data.get("regression", {})}

    def rule(
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

    def providers(self) -> list[str]:
        return sorted(self.rules)


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
    missing = [k for k in TOP_REQUIRED if k not in data]
    if missing:
        raise ToleranceError(f"{src}: missing top-level keys {missing}")
    unknown = set(data) - TOP_ALLOWED
    if unknown:
        raise ToleranceError(f"{src}: unknown top-level keys {sorted(unknown)}")
    if data["schema_version"] != SCHEMA_VERSION:
        raise ToleranceError(
            f"{src}: schema_version {data['schema_version']!r} != {SCHEMA_VERSION}"
        )
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
    reg = data.get("regression", {})
    if not isinstance(reg, dict) or set(reg) - set(REGRESSION_DEFAULTS):
        raise ToleranceError(f"{src}: [regression] allows only {sorted(REGRESSION_DEFAULTS)}")
    for k, v in reg.items():
        if not _num(v) or v <= 0:
            raise ToleranceError(f"{src}: regression.{k} must be a positive number")
    rules = data["rules"]
    if not isinstance(rules, dict) or not rules:
        raise ToleranceError(f"{src}: [rules] must be a non-empty table")
    if data["under_test"] not in rules:
        raise ToleranceError(f"{src}: no rules for the provider under test {data['under_test']!r}")
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
    return Path(__file__).resolve().parents[2] / "tolerances"

"""Accuracy models: named sets of unit roundoffs per rounding class, read from a tolerance file.

A provider declares the model it implements (`ACCURACY_MODEL` in its provider module); the
tolerance file (schema 2, `[models.<name>]`) gives the model's constants as short expressions in
the symbols below, each traced to blockattn/bounds/ERROR_ANALYSIS.md. `resolve` turns a model into
the numbers of one dtype, the form `oracles.error_bound` takes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

# Unit roundoff u = 2^-p of the input/output formats (p significand bits incl. the implicit one,
# Higham Table 2.1) and eta = half the smallest subnormal: the absolute error of one rounding to
# nearest in the subnormal range.
U: dict[str, float] = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}
ETA: dict[str, float] = {"bfloat16": 2.0**-134, "float16": 2.0**-25, "float32": 2.0**-150}
U_FP32, ETA_FP32 = 2.0**-24, 2.0**-150
# The smallest normal FP32 number: an FP32 operation that flushes a subnormal result to zero
# (GPU ftz arithmetic, approximate exp2, tensor-core products) errs by less than this.
TINY_FP32 = 2.0**-126

CLASSES: tuple[str, ...] = (
    "rot", "S", "softmax", "P_gemm", "P_bwd", "V_dP", "dP", "Di_from_O", "dS_gemm", "grad_rot",
    "io", "acc",
)  # fmt: skip  (= oracles.error_bound.CLASSES; tests/bounds checks it)

# Classes a model's implementation rounds once more as scale * x, after the softmax scale
# multiply (ERROR_ANALYSIS.md §2 eager, §4 "A rounding after the softmax scale"): eager's
# autograd rounds dS to the input dtype and then the gradient of `S * scale`, scale * dS, again.
# Which value a class rounds is part of the computation the model's name stands for, as its
# description is; the constants of a released file cannot change (MANIFEST), so it is kept here.
AFTER_SCALE: dict[str, tuple[str, ...]] = {"eager-input-dtype": ("dS_gemm",)}

_SYMBOLS = "u_in|u_fp32|eta_in|eta_fp32|tiny_fp32"
_TERM = re.compile(rf"^\s*(?:(\d+(?:\.\d+)?)\s*\*?\s*)?({_SYMBOLS})(?:\^(\d))?\s*$")
_NUM = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")


class ModelError(ValueError):
    """A malformed accuracy model in a tolerance file (a configuration error: exit 2)."""


def evaluate(expr: str, dtype: str) -> float:
    """'u_in^2 + 2 u_fp32' -> a number for `dtype`. Only sums of k * symbol^p are allowed."""
    if not isinstance(expr, str) or not expr.strip():
        raise ModelError(f"expected an expression string, got {expr!r}")
    sym = {"u_in": U[dtype], "eta_in": ETA[dtype], "u_fp32": U_FP32, "eta_fp32": ETA_FP32,
           "tiny_fp32": TINY_FP32}
    total = 0.0
    for term in expr.split("+"):
        if _NUM.match(term):
            total += float(term)
            continue
        m = _TERM.match(term)
        if not m:
            raise ModelError(f"cannot read term {term.strip()!r} of {expr!r}")
        coef, name, power = m.groups()
        total += float(coef or 1.0) * sym[name] ** int(power or 1)
    return total


@dataclass(frozen=True)
class Model:
    name: str
    c: float
    u: dict[str, str]
    eta: dict[str, str]
    data: dict[str, Any]

    def resolve(self, dtype: str) -> dict[str, Any]:
        return {
            "u": {k: evaluate(v, dtype) for k, v in self.u.items()},
            "eta": {k: evaluate(v, dtype) for k, v in self.eta.items()},
            "after_scale": AFTER_SCALE.get(self.name, ()),
        }

    @property
    def sha(self) -> str:
        """Fingerprint of the constants: a record's bound must have been computed with these."""
        blob = json.dumps({"c": self.c, "u": self.u, "eta": self.eta}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


MODEL_TEXT_FIELDS = ("description", "cite", "c_reason")


def parse(name: str, data: Any, where: str) -> Model:
    if not isinstance(data, dict):
        raise ModelError(f"{where}: expected a table")
    unknown = set(data) - {*MODEL_TEXT_FIELDS, "c", "u", "eta"}
    if unknown:
        raise ModelError(f"{where}: unknown fields {sorted(unknown)}")
    for f in MODEL_TEXT_FIELDS:
        if not isinstance(data.get(f), str) or not data[f].strip():
            raise ModelError(f"{where}.{f}: required, a non-empty string (say why)")
    c = data.get("c")
    if isinstance(c, bool) or not isinstance(c, int | float) or not c >= 1.0:
        raise ModelError(f"{where}.c: must be a number >= 1 (the first-order terms count once)")
    tables = {}
    for part in ("u", "eta"):
        t = data.get(part)
        if not isinstance(t, dict):
            raise ModelError(f"{where}.{part}: required table of rounding classes")
        missing, extra = set(CLASSES) - set(t), set(t) - set(CLASSES)
        if missing or extra:
            raise ModelError(
                f"{where}.{part}: classes must be exactly {list(CLASSES)}"
                + (f"; missing {sorted(missing)}" if missing else "")
                + (f"; unknown {sorted(extra)}" if extra else "")
            )
        for cls, expr in t.items():
            for dt in U:
                try:
                    evaluate(expr, dt)
                except ModelError as exc:
                    raise ModelError(f"{where}.{part}.{cls}: {exc}") from None
        tables[part] = dict(t)
    return Model(name, float(c), tables["u"], tables["eta"], data)

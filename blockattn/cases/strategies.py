"""Case spaces per profile, as Hypothesis strategies (tests) and a seeded sampler (CLI `run`).

Both draw from the same `Space`, so a fuzz failure in `blockattn run` is a case the pytest fuzz
test could also have found. Hypothesis profiles: `ci` (derandomised, few small cases: CPU
interpreter), `gpu` (larger), `nightly` (many examples, large shapes). Select with pytest's
`--hypothesis-profile NAME` or env BLOCKATTN_HYPOTHESIS_PROFILE (see tests/conftest.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from blockattn.cases.spec import CaseSpec
from blockattn.names import DISTRIBUTIONS

# Lengths that sit on / around block boundaries are where masking and tiling bugs live.
EDGE_LENGTHS = (0, 1, 63, 64, 65, 127, 128, 129)
PROFILE_ENV = "BLOCKATTN_HYPOTHESIS_PROFILE"
_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class Space:
    max_B: int
    max_len: int  # upper bound of max_len for drawn lengths
    long_lengths: tuple[int, ...]  # extra "long" explicit lengths
    max_total: int  # cap on sum(lengths) for explicit-length draws (interpreter speed)
    heads: tuple[int, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    variants: tuple[str, ...] = ("plain", "rotary", "projection")
    distributions: tuple[str, ...] = DISTRIBUTIONS
    gqa: bool = True  # projection cases may draw kvheads < H (cut when the kernel has no GQA)
    # Block sizes of the contract: 1, a non-power of two, the default, MAX_BLOCK_SIZE (cut to
    # what the provider declares). A third of the draws take one other than 64.
    block_sizes: tuple[int, ...] = (1, 24, 64, 128)
    # Optional arguments (cut to what the provider declares): int64 offsets on a quarter of
    # the draws, max_seq_len exact or larger on a quarter, each from its own stream.
    offsets_dtypes: tuple[str, ...] = ("int32", "int64")
    max_seq_lens: tuple[str, ...] = ("omitted", "exact", "larger")


SPACES: dict[str, Space] = {
    "ci": Space(
        max_B=4,
        max_len=160,
        long_lengths=(200,),
        max_total=420,
        heads=(1, 2),
        head_dims=(64, 128),
        dtypes=("bfloat16", "float16"),
    ),
    "gpu": Space(
        max_B=32,
        max_len=2048,
        long_lengths=(1000, 4097),
        max_total=1 << 16,
        heads=(1, 2, 4, 8),
        head_dims=(64, 128),
        dtypes=("bfloat16", "float16"),
    ),
    "nightly": Space(
        max_B=128,
        max_len=8192,
        long_lengths=(4097, 16384, 32769),
        max_total=1 << 19,
        heads=(1, 2, 4, 8, 16),
        head_dims=(64, 128),
        dtypes=("bfloat16", "float16"),
    ),
}

settings.register_profile(
    "ci",
    max_examples=2,  # CI time: each draw runs the interpreter (.ci/run <= 15 min on 2 cores)
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "gpu",
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def active_space() -> Space:
    """Space of the currently loaded Hypothesis profile (falls back to ci)."""
    name = os.environ.get(PROFILE_ENV) or settings.get_current_profile_name()
    return SPACES.get(name, SPACES["ci"])


@st.composite
def lengths_lists(draw: st.DrawFn, space: Space) -> list[int]:
    pool = st.sampled_from((*EDGE_LENGTHS, *space.long_lengths))
    anyl = st.integers(0, space.max_len)
    lens = draw(st.lists(st.one_of(pool, anyl), min_size=1, max_size=space.max_B))
    # Trim to the total-token budget (drop from the end, keep at least one entry).
    while len(lens) > 1 and sum(lens) > space.max_total:
        lens.pop()
    if sum(lens) > space.max_total:
        lens = [space.max_total]
    return lens


@st.composite
def case_specs(
    draw: st.DrawFn, space: Space | None = None, *, variants: tuple[str, ...] | None = None
) -> CaseSpec:
    space = space or active_space()
    variant = draw(st.sampled_from(variants or space.variants))
    H = draw(st.sampled_from(space.heads))
    kvheads = None
    if variant == "projection" and H > 1 and space.gqa:
        kvheads = draw(st.sampled_from([d for d in range(1, H + 1) if H % d == 0]))
    common = dict(
        seed=draw(st.integers(0, 2**31 - 1)),
        variant=variant,
        H=H,
        kvheads=kvheads,
        D=draw(st.sampled_from(space.head_dims)),
        dtype=draw(st.sampled_from(space.dtypes)),
        distribution=draw(st.sampled_from(space.distributions)),
        scale=draw(st.one_of(st.none(), st.sampled_from((0.05, 0.125, 0.5)))),
        rotate_v=draw(st.booleans()),
        block_size=draw(st.sampled_from(space.block_sizes)),
        offsets_dtype=draw(st.sampled_from(space.offsets_dtypes)),
        max_seq_len=draw(st.sampled_from(space.max_seq_lens)),
        source="fuzz",
    )
    if draw(st.booleans()):
        return CaseSpec(lengths=tuple(draw(lengths_lists(space))), **common)
    B = draw(st.integers(1, space.max_B))
    max_len = draw(st.integers(1, min(space.max_len, max(1, space.max_total // B))))
    sparsity = draw(st.floats(0.0, 0.99, allow_nan=False))
    return CaseSpec(B=B, max_len=max_len, sparsity=round(sparsity, 4), **common)


def _block_size(space: Space, seed: int, i: int) -> int:
    """The block size of draw i: from its own stream, so every other field of every draw (and
    so the ids of the cases at block size 64) stays what earlier releases drew."""
    other = [b for b in space.block_sizes if b != 64]
    if 64 not in space.block_sizes:
        return random.Random(f"{seed}:{i}:block_size").choice(other)
    r = random.Random(f"{seed}:{i}:block_size")
    return r.choice(other) if other and r.random() < 1 / 3 else 64


def _options(space: Space, seed: int, i: int) -> dict[str, str]:
    """The optional arguments of draw i, from their own stream (as `_block_size`)."""
    r = random.Random(f"{seed}:{i}:options")
    out = {}
    if "int32" not in space.offsets_dtypes or ("int64" in space.offsets_dtypes
                                               and r.random() < 1 / 4):  # fmt: skip
        out["offsets_dtype"] = "int64"
    given = [m for m in space.max_seq_lens if m != "omitted"]
    if given and ("omitted" not in space.max_seq_lens or r.random() < 1 / 4):
        out["max_seq_len"] = r.choice(given)
    return out


# Scale edges drawn by the fuzz (one draw in SCALE_EDGE_SHARE, from its own stream as
# `_block_size`, so every other draw keeps its id): 0 (each row the mean of its block's V), a
# negative scale, a tiny one, and a large one, which on scaled_logits or negative_rows inputs
# puts whole rows of scores far above zero or below FP64's exp underflow (~-745).
SCALE_EDGES = (0.0, -0.125, 1e-6, 4.0)
SCALE_EDGE_SHARE = 1 / 6


def _scale_edge(seed: int, i: int) -> float | None:
    r = random.Random(f"{seed}:{i}:scale_edge")
    return r.choice(SCALE_EDGES) if r.random() < SCALE_EDGE_SHARE else None


def sample_specs(space: Space, n: int, seed: int) -> list[CaseSpec]:
    """Seeded draws from the same space without Hypothesis (for `blockattn run`'s fuzz part)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        variant = rng.choice(space.variants)
        H = rng.choice(space.heads)
        kvheads = None
        if variant == "projection" and H > 1 and space.gqa:
            kvheads = rng.choice([d for d in range(1, H + 1) if H % d == 0])
        case_seed = rng.randrange(2**31)  # drawn in the order of earlier releases
        D, dtype = rng.choice(space.head_dims), rng.choice(space.dtypes)
        dist = rng.choice(space.distributions)
        common = dict(
            seed=case_seed,
            variant=variant,
            H=H,
            kvheads=kvheads,
            D=D,
            dtype=dtype,
            distribution=dist,
            scale=rng.choice((None, None, 0.05, 0.125, 0.5)),
            rotate_v=rng.random() < 0.5,
            source="fuzz",
            # Readable and unique within a sample: sampler seed, draw index, what it is.
            name=f"fuzz-s{seed}-{i}-{variant}-{_SHORT[dtype]}-d{D}-{dist}",
        )
        edge = _scale_edge(seed, i)
        if edge is not None:  # the case id carries the scale; the name's fields stay as before
            common.update(scale=edge)
        bs = _block_size(space, seed, i)
        if bs != 64:
            common.update(block_size=bs, name=f"{common['name']}-bs{bs}")
        for key, value in _options(space, seed, i).items():
            tag = {"offsets_dtype": "off", "max_seq_len": "msl"}[key]
            common.update({key: value, "name": f"{common['name']}-{tag}{value}"})
        if rng.random() < 0.5:
            pool = (*EDGE_LENGTHS, *space.long_lengths)
            lens = [
                rng.choice(pool) if rng.random() < 0.6 else rng.randint(0, space.max_len)
                for _ in range(rng.randint(1, space.max_B))
            ]
            while len(lens) > 1 and sum(lens) > space.max_total:
                lens.pop()
            lens = [min(n_, space.max_total) for n_ in lens]
            out.append(CaseSpec(lengths=tuple(lens), **common))
        else:
            B = rng.randint(1, space.max_B)
            max_len = rng.randint(1, min(space.max_len, max(1, space.max_total // B)))
            out.append(
                CaseSpec(B=B, max_len=max_len, sparsity=round(rng.uniform(0, 0.99), 4), **common)
            )
    return out

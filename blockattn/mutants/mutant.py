"""What a planted bug is: a file of the blockattn package, an exact anchor text in it and its
replacement (see `catalog` for the rules every mutant follows), and the package files the
mutant modules name."""

from __future__ import annotations

from dataclasses import dataclass

ATT = "kernels/attention.py"  # the portable kernels and their launchers
TILE_MATH = "kernels/tile_math.py"  # the tile arithmetic both kernel paths share
DISPATCH = "kernels/dispatch.py"
HOPPER = "kernels/attention_hopper.py"
PREFER_HOPPER = (("BLOCKATTN_KERNEL_PATH", "prefer-hopper"),)
# The portable kernels whatever the GPU's default: on an H200 the Gluon backward takes every plain
# backward (D = 64 and 128), so a bug in the portable plain backward's code is reached by no
# quick-tier case there unless this selects it.
PORTABLE = (("BLOCKATTN_KERNEL_PATH", "portable"),)
GLUON = "kernels/attention_gluon.py"  # the Gluon backward (sm_90 only: no interpreter)
PREFER_GLUON = (("BLOCKATTN_KERNEL_PATH", "prefer-gluon"),)
# The Gluon fused-rotary backward (the bf16 default on sm_90): prefer-gluon sends every gate
# rotary backward it can run to it (fp16 too); its own GPU tests call it directly.
GLUON_ROTARY = "kernels/attention_gluon_rotary.py"
GLUON_ROTARY_TESTS = ("tests/kernels/test_gluon_rotary.py",)
# The Gluon fused-rotary forward (the default on sm_90), judged by the same tests file.
GLUON_ROTARY_FWD = "kernels/attention_gluon_rotary_fwd.py"
# Force the Gluon path's one-chain kernel (_bwd_kernel) or its two-chain kernel (_consumer)
# whatever the GPU's default (attention_gluon.chains), so each mutant runs the code it mutates.
GLUON_CHAINS_1 = (("BLOCKATTN_GLUON_CHAINS", "1"),)
GLUON_CHAINS_2 = (("BLOCKATTN_GLUON_CHAINS", "2"),)
GLUON_LEAN = (("BLOCKATTN_GLUON_CHAINS", "lean"),)  # one chain alone in _bwd_kernel_chains
# The repository tests that judge the chunked rotary kernels (backward, forward) against their
# whole-tile bodies: the gate's quick tier has no D = 128 rotary case with rotate_v on.
CHUNK_BWD_TEST = "tests/kernels/test_attention.py::test_rotary_chunks_match_whole_tile"
CHUNK_TESTS = (CHUNK_BWD_TEST,
               "tests/kernels/test_attention.py::test_rotary_fwd_chunks_match_whole_tile")
TILES = "kernels/tiles.py"
OPS = "ops.py"
ERROR_BOUND = "../oracles/error_bound.py"  # the FP64 bound: the `oracles` package beside blockattn



@dataclass(frozen=True)
class Mutant:
    name: str
    group: str  # "core" | "rotary" | "precision" | "suite" | "contract"
    file: str  # path relative to the blockattn package directory
    anchor: str
    replacement: str
    description: str
    ci: bool = False
    # Environment the mutant's worker runs under: a bug in the Hopper path only shows where
    # BLOCKATTN_KERNEL_PATH selects that path.
    env: tuple[tuple[str, str], ...] = ()
    # Tests of the repository (paths or node ids under tests/) the worker also runs on the
    # mutated copy: for a bug in the judge that no gate run can show (a bound term, a rule for
    # inputs the quick tier never has), the judge's own known-answer tests are what kills it.
    tests: tuple[str, ...] = ()
    # The mutated code runs only on an sm_90 GPU (the Gluon path: Gluon has no interpreter).
    # Elsewhere the mutant is reported "not run", never counted as killed.
    needs_sm90: bool = False
    # The mutated code runs only on a GPU (inline PTX that the interpreter never runs: the
    # portable kernels' packed bf16 split). On CPU: "not run", as above.
    needs_gpu: bool = False

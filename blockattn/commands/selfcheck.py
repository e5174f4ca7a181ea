"""`blockattn selfcheck`: verify the FP64 oracles against relations that must hold."""

from __future__ import annotations

import argparse
import json

HELP = "Self-verify the FP64 oracles (autograd, second formulation, metamorphic relations)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="torch device to run on (default: cpu)")
    parser.add_argument(
        "--json", action="store_true", help="print the results as JSON instead of Markdown"
    )


def main(args: argparse.Namespace) -> int:
    # Imported lazily so `blockattn --help` stays fast.
    import torch

    from oracles.selfcheck import format_markdown, run_selfchecks

    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise ValueError(f"--device {args.device!r}: not a torch device ({exc})") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available")
    results = run_selfchecks(device=str(device))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(format_markdown(results, title=f"Oracle self-check ({device})"))
    return 0 if all(r["passed"] for r in results) else 1

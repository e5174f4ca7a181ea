"""Stage 2, run: the device environment, the FP64 oracle's outputs, each provider called safely
on a case's inputs, and the append-only results.jsonl. Importing this package is torch-free."""

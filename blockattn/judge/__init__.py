"""Stage 3, judge: per-element metrics against the oracle, the accuracy models' bounds from the
tolerance files, verdicts, gate rules, calibration and the judge's own known-answer self-test."""

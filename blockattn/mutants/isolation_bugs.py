"""Planted bugs in the isolation layer (`blockattn.run.isolated`, `run.process`, `run.worker`,
`run.calls`, the gate's refusals): each lets a kernel reach, outlast or fool the judge again. No
gate run of an honest kernel can show them, so each names the red-team tests that kill it
(`Mutant.tests`, run on the mutated copy): the adversarial kernels of tests/redteam.
"""

from __future__ import annotations

from blockattn.mutants.mutant import Mutant

ISO = "run/isolated.py"
PROC = "run/process.py"  # the judge's handle of one worker process
RT = "tests/redteam/test_redteam.py"

ISOLATION: tuple[Mutant, ...] = (
    Mutant(
        "isolation-watchdog-never-fires", "isolation", PROC,
        "deadline = t0 + limit",
        "deadline = t0 + 1000 * limit",
        "the watchdog waits 1000x the call timeout: a hanging kernel hangs the run",
        tests=(f"{RT}::test_hang_fails_its_case_and_the_run_goes_on",),
    ),
    Mutant(
        "isolation-exit-not-named", "isolation", PROC,
        'return f"the worker exited with code {code} during the call (the kernel called exit?)"',
        'return "the call failed"',
        "a worker's exit is not named: exit(0) reads like any error",
        tests=(f"{RT}::test_exit_zero_fails_the_gate",),
    ),
    Mutant(
        "isolation-results-file-trusted", "isolation", "run/results.py",
        "    if ids != written:",
        "    if False:",
        "results.jsonl is not checked against what the judge wrote: a forged line counts",
        tests=(f"{RT}::test_forged_results_line_is_refused",),
    ),
    Mutant(
        "isolation-strays-ignored", "isolation", PROC,
        "        strays = _descendants_by_token(self.token)",
        "        strays = []",
        "processes that left the worker's group are neither killed nor reported",
        tests=(f"{RT}::test_grandchild_is_killed_and_named",),
    ),
    Mutant(
        "isolation-in-flight-unchecked", "isolation", "run/calls.py",
        "    if not changed:\n        return \"\"",
        "    if True:\n        return \"\"",
        "outputs that change after the call returned are accepted (side streams, threads)",
        tests=(f"{RT}::test_catalog_each_adversary_fails_by_name",),
    ),
    Mutant(
        "isolation-subclass-accepted", "isolation", "run/calls.py",
        "    if type(o) is not Tensor and type(o) is not torch.nn.Parameter:",
        "    if not isinstance(o, Tensor):",
        "a tensor subclass (a lazy or deferred output) is accepted as an output",
        tests=(f"{RT}::test_catalog_each_adversary_fails_by_name",),
    ),
    Mutant(
        "isolation-unsealed-file-accepted", "isolation", "run/wire.py",
        "    if not seals & fcntl.F_SEAL_SHRINK:",
        "    if False:",
        "the judge maps a worker's memory file that could still shrink under its reads",
        tests=("tests/redteam/test_wire.py::test_unsealed_file_is_refused",),
    ),
    Mutant(
        "isolation-reply-not-copied-out", "isolation", "run/wire.py",
        "    if private:\n        mm = mmap.mmap(",
        "    private = False\n    if private:\n        mm = mmap.mmap(",
        "the judge's outputs are views of the worker's memory file, which it can write on",
        tests=("tests/redteam/test_wire.py::test_sealed_file_is_read_and_copied_out",),
    ),
    Mutant(
        "isolation-repeats-answer-the-first-call",
        "isolation",
        "run/worker.py",
        "        snaps.append(snap)",
        "        snaps.append(snaps[0] if snaps else snap)",
        "the worker answers the first call's outputs for every repeat of a probe: a kernel "
        "whose gradients differ from call to call passes determinism",
        tests=(f"{RT}::test_each_repeat_answers_its_own_call",),
    ),
    Mutant(
        "isolation-lost-call-not-sent-again", "isolation", ISO,
        "                return self.send_case(prov, inp, variant, resent=True)()",
        "                return failed(exc)",
        "a case in flight behind a call that killed its worker is failed instead of sent to a "
        "fresh worker: a kernel's one crash fails the next case too",
        tests=(f"{RT}::test_a_crash_fails_its_own_case_only",
               f"{RT}::test_hang_fails_its_case_and_the_run_goes_on"),
    ),
    Mutant(
        "isolation-answer-reads-every-call-in-flight", "isolation", PROC,
        "            self.settle(until=box)\n        except CallFailed:",
        "            self.settle()\n        except CallFailed:",
        "collecting a case reads the answers of the calls behind it too: the next case's crash "
        "is blamed on this one",
        tests=(f"{RT}::test_a_crash_fails_its_own_case_only",),
    ),
    Mutant(
        "isolation-dead-worker-calls-sent-again", "isolation", ISO,
        "            with contextlib.suppress(CallFailed):  # its answers, and the failure, of "
        "calls sent\n                self.worker.settle()\n",
        "",
        "a worker found dead when the next case is sent is replaced without reading what it "
        "answered: the call that killed it is sent again to a fresh worker, and a crash passes",
        tests=(f"{RT}::test_a_crash_fails_its_own_case_only",
               f"{RT}::test_a_worker_found_dead_is_read_before_it_is_replaced"),
    ),
    Mutant(
        "isolation-hung-up-worker-calls-sent-again", "isolation", PROC,
        "            with contextlib.suppress(CallFailed):\n                self.settle()\n"
        "            self.kill()\n            raise Lost(",
        "            self.kill()\n            raise Lost(",
        "a send that finds the worker's line closed (a GPU worker dying slowly) marks every call "
        "in flight lost: the call that killed it is sent again to a fresh worker and passes",
        tests=(f"{RT}::test_a_worker_that_hung_up_is_read_before_it_is_replaced",
               f"{RT}::test_a_worker_that_hangs_up_before_dying_fails_its_own_case_only"),
    ),
    Mutant(
        "isolation-dead-worker-strays-dropped", "isolation", PROC,
        "        self.killed_strays += strays\n",
        "",
        "a process left behind by a worker that died mid-call is killed but not named: only the "
        "last worker's strays reach the report",
        tests=(f"{RT}::test_a_worker_that_hangs_up_before_dying_fails_its_own_case_only",),
    ),
    Mutant(
        "isolation-unsealed-answer-used-in-place", "isolation", "run/wire.py",
        "private=not seals & fcntl.F_SEAL_WRITE)",
        "private=False)",
        "a worker's memory file is used in place though not sealed against writing: the worker "
        "rewrites the outputs after the judge received them",
        tests=("tests/redteam/test_wire.py::test_sealed_file_is_read_and_copied_out",),
    ),
    Mutant(
        "isolation-bench-batch-sized-by-its-round-trip", "isolation", "bench/isolated.py",
        "            if took >= batch_ms or n >= MAX_CALLS:\n                return n",
        "            return max(3, math.ceil(batch_ms / (took / n)))",
        "the bench sizes its batches from one short batch, round trip included: a replayed "
        "call of microseconds gets a few calls a batch and a time above the physical floor",
        tests=("tests/redteam/test_timing_floor.py",),
    ),
    Mutant(
        "isolation-judge-files-unwatched", "isolation", "run/isolated.py",
        "        return stray + judge_files.lines(self.files)",
        "        return stray",
        "the judge does not check its own files when the worker ends: a kernel that rewrites "
        "the judge's code, plants its bytecode or drops a start-up hook passes",
        tests=("tests/redteam/test_judge_files.py",),
    ),
    Mutant(
        "isolation-plugin-judge-files-unwatched", "isolation", "pytest_plugin.py",
        "        for line in self.tampered():  # the kernel wrote the judge's files: this "
        "case fails\n            v.fail(line)\n",
        "",
        "the pytest plugin's cases do not check the judge's files: a kernel that rewrites the "
        "judge's code passes its test",
        tests=("tests/redteam/test_judge_files.py",),
    ),
    Mutant(
        "isolation-cli-ignores-what-the-kernel-left", "isolation", "cli.py",
        "    if late and rc == 0:",
        "    if late and rc == 0 and not late:",
        "a command without a gate verdict (contract, audit, bench, replay) exits 0 although its "
        "kernel wrote the judge's files or left processes running",
        tests=("tests/redteam/test_judge_files.py",),
    ),
    Mutant(
        "isolation-bench-report-omits-what-the-kernel-did", "isolation", "bench/runner.py",
        "        state.isolation = isolated.end_worker()\n",
        "",
        "bench's report (bench.json, its summary) says nothing of a kernel that wrote the "
        "judge's files: only the exit code and stderr do, from the command line's own check",
        tests=("tests/redteam/test_judge_files.py::test_bench_says_it_in_its_report_too",),
    ),
    Mutant(
        "isolation-contract-report-omits-what-the-kernel-did", "isolation",
        "commands/contract.py",
        "            for line in isolated.end_worker()]  # fmt: skip",
        "            for line in []]  # fmt: skip",
        "contract's report (contract.json, contract.md) says nothing of a kernel that wrote the "
        "judge's files: only the exit code and stderr do, from the command line's own check",
        tests=("tests/redteam/test_judge_files.py::test_every_command_that_hosts_a_kernel_fails_on_it",),
    ),
    Mutant(
        "isolation-judge-imported-lazily", "isolation", "run/isolated.py",
        "        judge_files.import_judge()\n",
        "",
        "the judge imports its modules as it needs them, after the kernel ran: bytecode the "
        "kernel planted is loaded as the judge's own code",
        tests=("tests/redteam/test_judge_files.py",),
    ),
    Mutant(
        "isolation-gate-takes-in-process", "isolation", "commands/gate.py",
        '            and p.get("isolation") != "worker"]',
        '            and p.get("isolation") not in ("worker", "NOT ISOLATED")]',
        "the gate judges records whose kernel ran in the judge's own process",
        tests=(f"{RT}::test_gate_refuses_records_of_an_in_process_run",),
    ),
)

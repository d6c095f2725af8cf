"""The failure-classification table, as data: each rule is a pattern, where it is looked for,
and what it means.

A failed test's evidence is split into *sources* (``read_sources``):

- ``final``: the final exception alone (the last block of pytest's ``E`` lines, else the
  evidence line): what the process itself failed with, not what it logged or caught on the way;
- ``message``: the failure's message and traceback (pytest's longrepr, our evidence line);
- ``stderr`` / ``stdout``: what the test printed (pytest's "Captured …" sections);
- ``exit``: how the pytest process ended when it died during the test (the executor's
  ``crashed: …`` line: a signal or an exit code);
- ``ranks``: why each spawned worker failed (``RankFailure`` headers, torch.multiprocessing's
  ``process N terminated with …``);
- ``timeout``: the timeout that killed it (the executor's ``timeout: …``, pytest-timeout's line).

Machine-level rules (``machine=True``) say the host or GPU itself is broken: the failure is INFRA
("retry") whatever the base did. They read the final exception and how the process ended, never
a line anywhere in a chained traceback or a captured log (a test may fake a full disk, then fail
in the PR's code); a rule that must read the process's output (the driver's Xid line) names the
final exception it needs (``requires``). A limit the harness or a suite enforces (the shard's
timeout, a rank's deadline) ending on a busy machine is the machine's too.

Shard-wide rules (``machine="shard"``) are INFRA only when the same error hits at least
``SHARD_WIDE_TESTS`` tests in at least two files of one shard at once; alone they describe the
failure. Every other rule only names the failure (its *signature*: "crash: SIGSEGV in rank 1",
"hang: killed after 300 s"); its category then comes from the re-runs and the
base pipeline (``harness/analysis/classify.py``). The first matching rule of each kind wins; the
table's order is its priority.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stagebot.harness.analysis.evidence import last_e_block

SOURCES = ("final", "message", "stderr", "stdout", "exit", "ranks", "timeout")
SHARD_WIDE_TESTS = 3
# How the executor and the report job say a process or its output failed (the ``exit`` source).
HARNESS_PREFIXES = ("crashed:", "corrupt output:", "result.json unreadable:", "order-dependent:")
_SECTION = re.compile(r"^----- (?P<name>.+?) -----$", re.MULTILINE)
_RANK_HEADER = re.compile(r"^--- (rank \d+: .*?) ---$", re.MULTILINE)
_RANK_SUMMARY = re.compile(r"\d+ of \d+ ranks failed \([^)]*\): (rank \d+: .*)$", re.MULTILINE)
_MP_EXIT = re.compile(r"(?:process|Process) \d+ terminated with (?:signal \w+|exit code -?\d+)")
_PYTEST_TIMEOUT = re.compile(r"Timeout \(>[\d.]+s\) from pytest-timeout\.?")
# A failure the test asserted: its own words, never a machine-level signature.
_ASSERTION = re.compile(r"\s*(?:E\s+)?(?:[\w.]*AssertionError\b|assert\b)")
_SIZE = re.compile(r"(?P<n>[\d.]+) (?P<unit>[KMGT]i?B|B)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class Rule:
    name: str
    machine: bool | str  # True: INFRA; "shard": INFRA when shard-wide; False: a signature only
    where: tuple[str, ...]  # which SOURCES it reads
    pattern: re.Pattern[str]
    signature: str  # str.format over the match's named groups (and a check's extras)
    means: str  # one phrase for docs/failure-analysis.md's table and the report
    sticky: bool = False  # poisons the process: later failures of the shard are its collateral
    check: Callable[[re.Match[str]], dict[str, str] | None] | None = None  # None: no match
    requires: re.Pattern[str] | None = None  # the final exception this rule's evidence needs
    limit: bool = False  # a limit that ran out: the report gives the host's load with it

    def match(self, sources: dict[str, str]) -> str | None:
        """The signature when the rule matches ``sources``, else None."""
        if self.requires is not None and not self.requires.search(sources.get("final", "")):
            return None
        for where in self.where:
            for found in self.pattern.finditer(sources.get(where, "")):
                extra = self.check(found) if self.check else {}
                if extra is None:
                    continue
                groups = {k: v for k, v in found.groupdict().items() if v is not None}
                return self.signature.format(**{**groups, **extra})
        return None


def _bytes(text: str) -> float:
    found = _SIZE.search(text)
    return float(found["n"]) * _UNITS.get(found["unit"], 1) if found else 0.0


def _oom_holders(found: re.Match[str]) -> dict[str, str]:
    """Who holds the GPU's memory, from PyTorch's OOM message: other processes ("Process 123 has
    40.00 GiB memory in use", each once) and this one ("this process has 17.50 GiB memory in
    use"). It is the neighbours' fault only when they hold more than this process and the request
    would have fit had they held nothing: a request larger than the device (or than what this
    process leaves free) is the test's own, whoever else is there."""
    text = found.string[found.start() : found.start() + 2000]
    others = dict(re.findall(r"Process (\d+) has ([\d.]+ [KMGT]?i?B) memory in use", text))
    mine = re.search(r"this process has ([\d.]+ [KMGT]?i?B) memory in use", text)
    held_by_me = _bytes(mine[1]) if mine else 0.0
    would_fit = _bytes(found["size"]) <= _bytes(found["total"]) - held_by_me
    return {
        "others": ", ".join(f"process {pid} holds {size}" for pid, size in others.items()),
        "mine": mine[1] if mine else "?",
        "foreign": "yes" if would_fit and sum(map(_bytes, others.values())) > held_by_me else "",
    }


def _foreign_oom(found: re.Match[str]) -> dict[str, str] | None:
    holders = _oom_holders(found)
    return holders if holders["foreign"] else None


# The final exception of a process whose GPU call failed (what a driver-logged fault needs).
_CUDA_FAILED = re.compile(r"CUDA error|CUDA driver error|cudaError|NCCL error")
_LOAD = r"(?:, (?P<load>load average [\d.]+ on \d+ CPUs?))?"


def _with_load(found: re.Match[str]) -> dict[str, str]:
    return {"load": found["load"] or "load average not recorded"}


_OOM = re.compile(
    r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)\. GPU (?P<gpu>\d+) has a "
    r"total capacity of (?P<total>[\d.]+ [KMGT]?i?B)"
)

RULES: tuple[Rule, ...] = (
    # -- machine-level: the host or the GPU is broken; retry ------------------------------------
    Rule(
        "oom-foreign",
        True,
        ("final",),
        _OOM,
        "OOM: GPU {gpu} memory held by another process ({others})",
        "CUDA OOM while other processes hold most of the GPU's memory (PyTorch names them)",
        check=_foreign_oom,
    ),
    Rule(
        "disk-full",
        True,
        ("final", "exit"),
        re.compile(r"\[Errno 28\] No space left on device"),
        "disk full",
        "the disk is full ([Errno 28] ENOSPC)",
    ),
    Rule(
        "disk-quota",
        True,
        ("final", "exit"),
        re.compile(r"\[Errno 122\] Disk quota exceeded"),
        "disk full: quota exceeded",
        "the user's disk quota is used up ([Errno 122] EDQUOT): the disk, for this user",
    ),
    Rule(
        "gpu-ecc",
        True,
        ("final", "ranks"),
        re.compile(r"uncorrectable ECC error encountered"),
        "GPU ECC error",
        "an uncorrectable ECC error on the GPU",
    ),
    Rule(
        "gpu-xid",
        True,
        ("final", "stderr", "stdout"),
        re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)"),
        "GPU Xid {xid} on {pci}",
        "the driver logged an Xid error for the GPU while a CUDA call failed",
        requires=_CUDA_FAILED,
    ),
    Rule(
        "gpu-lost",
        True,
        ("final", "stderr", "stdout"),
        re.compile(r"GPU is lost|has fallen off the bus|Unable to determine the device handle"),
        "lost GPU",
        "the GPU fell off the bus / is lost while a CUDA call failed (reboot needed)",
        requires=_CUDA_FAILED,
    ),
    Rule(
        "gpu-unavailable",
        True,
        ("final", "ranks"),
        re.compile(
            r"CUDA-capable device\(s\) (?:is|are|is/are) busy or unavailable"
            r"|cudaErrorDevicesUnavailable|No CUDA GPUs are available"
        ),
        "GPU unavailable",
        "the GPU is busy, held exclusively, or not visible",
    ),
    Rule(
        "download-failed",
        True,
        ("final",),
        re.compile(
            r"HTTPSConnectionPool\(host='(?P<host>[^']+)'.*?Max retries exceeded"
            r"|(?:We )?couldn't connect to '(?P<url>https?://[^']+)'"
            r"|Temporary failure in name resolution"
            r"|\b(?P<code>5\d\d) Server Error: [\w -]+ for url: (?P<for>\S+)"
        ),
        "download failed",
        "a test asset could not be downloaded (network, DNS or the server's 5xx)",
    ),
    Rule(
        "runner-killed",
        True,
        ("exit",),
        re.compile(r"killed by SIGKILL(?!.*again when re-run alone)"),  # every time: its own
        "runner killed",
        "the runner or the host's OOM killer killed the process (SIGKILL from outside)",
    ),
    Rule(
        "nccl-system-error",
        True,
        ("final", "ranks"),
        re.compile(r"NCCL error in: [^,]+, unhandled system error"),
        "NCCL system error",
        "NCCL failed in a system call (network, shared memory): the machine, not the code",
    ),
    Rule(
        "harness-output",
        True,
        ("exit",),
        re.compile(r"^(?:corrupt output|result\.json unreadable): (?P<what>.*)"),
        "unreadable test results",
        "the shard's result, JUnit or stream files could not be read",
    ),
    Rule(
        "shard-timeout",
        True,
        ("timeout",),
        re.compile(  # (hanging again alone, it is its own: hang-alone)
            r"^timeout: (?!pytest-timeout)(?!.*hung again when re-run alone)"
            r".*?\b(?:after|over) (?P<s>[\d.]+) s" + _LOAD
        ),
        "time limit: {s} s ran out ({load})",
        "a limit of the harness ran out (the shard's timeout_minutes or --shard-timeout)",
        check=_with_load,
        limit=True,
    ),
    Rule(
        "rank-deadline",
        True,
        ("final", "message"),
        re.compile(  # what harness/suites/sharding_ir/spawn.py's SpawnTimeout says first
            r"SpawnTimeout: (?P<n>\d+) ranks \(\w+\) timed out after (?P<s>[\d.]+) s of "
            r"(?P<phase>start-up|run) \(limit (?P<limit>[\d.]+) s: (?P<how>.*?)\); load average"
        ),
        "time limit: {n} ranks timed out after {s} s of {phase} (limit {limit} s: {how})",
        "spawned workers ran past the suite's limit (to start, or to finish)",
        limit=True,
    ),
    Rule(
        "connection-refused",
        "shard",
        ("final",),
        re.compile(r"Connection (?:refused|reset by peer)|\[Errno 111\]"),
        "connection refused",
        "a connection was refused or reset (shard-wide: a service of the machine is down)",
    ),
    # -- signatures: what kind of failure it is; the base decides NEW / PRE-EXISTING ------------
    Rule(
        "order-dependent",
        False,
        ("exit",),
        re.compile(r"^order-dependent: passes alone, fails after the (?P<n>\d+) test\(s\)"),
        "order-dependent: passes alone, fails after {n} earlier test(s) of its process",
        "it passed when re-run alone and failed again re-run after the tests before it: one of "
        "them leaks state into it (not flaky)",
    ),
    Rule(
        "nccl-watchdog",
        False,
        ("message", "stderr", "ranks"),
        re.compile(
            r"Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\("
            r"SeqNum=\d+, OpType=(?P<op>\w+).*?\) ran for (?P<ms>\d+) milliseconds"
        ),
        "hang: NCCL timeout ({op} on rank {rank} after {ms} ms)",
        "the NCCL watchdog aborted a collective that did not complete (a rank-divergent call)",
    ),
    Rule(
        "rank-signal",
        False,
        ("ranks",),
        re.compile(
            r"rank (?P<rank>\d+): killed by (?P<signal>SIG\w+)"
            r"|process (?P<proc>\d+) terminated with signal (?P<psig>SIG\w+)"
        ),
        "crash: {signal} in rank {rank}",
        "a spawned worker was killed by a signal",
        check=lambda m: (
            {"signal": m["psig"], "rank": m["proc"]} if m["psig"] else {"rank": m["rank"]}
        ),
    ),
    Rule(
        "sticky-cuda",
        False,
        ("message", "stderr", "ranks"),
        re.compile(
            r"CUDA error: (?P<what>an illegal memory access was encountered|unspecified launch "
            r"failure|device-side assert triggered|misaligned address|an illegal instruction was "
            r"encountered)"
        ),
        "crash: CUDA error: {what}",
        "a kernel fault that poisons the CUDA context: later tests of the process fail with it",
        sticky=True,
    ),
    Rule(
        "oom-own",
        False,
        ("message", "stderr"),
        _OOM,
        "OOM held by this process ({mine} of {total}, tried {size} more)",
        "CUDA OOM with the memory held by the test's own process",
        check=_oom_holders,
    ),
    Rule(
        "process-signal",
        False,
        ("exit",),
        re.compile(r"killed by (?P<signal>SIG\w+)"),
        "crash: pytest killed by {signal}",
        "the pytest process itself died of a signal during the test",
    ),
    Rule(
        "subprocess-signal",
        False,
        ("message",),
        re.compile(r"died with <Signals\.(?P<signal>SIG\w+): \d+>"),
        "crash: {signal} in a subprocess",
        "a subprocess the test started died of a signal",
    ),
    Rule(
        "process-exit",
        False,
        ("exit",),
        re.compile(r"pytest exited (?P<code>-?\d+)"),
        "crash: pytest exited {code}",
        "the pytest process exited during the test",
    ),
    Rule(
        "hang-alone",
        False,
        ("timeout",),
        re.compile(r"hung again when re-run alone with a limit of (?P<s>[\d.]+) s"),
        "hang: hangs when run alone ({s} s limit)",
        "the shard ran out of time during the test, and it hung again when re-run alone with "
        "twice the time it had had: its own hang, not the machine's limit",
    ),
    Rule(
        "timeout",
        False,
        ("timeout",),
        re.compile(r"Timeout \(>(?P<s>[\d.]+)s\) from pytest-timeout"),
        "hang: killed after {s} s",
        "the test's own timeout (pytest-timeout, signal method) stopped it",
    ),
    Rule(
        "thread-timeout",
        False,
        ("timeout",),
        re.compile(r"pytest-timeout \(thread method\)"),
        "hang: pytest-timeout (thread method) ended pytest",
        "the test's own timeout (pytest-timeout, thread method) dumped the stacks and ended pytest",
    ),
    Rule(
        "numerics",
        False,
        ("message",),
        re.compile(r"Mismatched elements:\s*(?P<n>\d+)\s*/\s*(?P<total>\d+)"),
        "numerics: {n}/{total} mismatched",
        "a numeric comparison (assert_close / allclose) failed",
    ),
    Rule(
        "hypothesis",
        False,
        ("message", "stdout"),
        re.compile(r"(?:Falsifying example|Failing test case): (?P<example>.+)"),
        "hypothesis: falsifying example {example}",
        "hypothesis found an input that fails",
    ),
    Rule(
        "rank-exception",
        False,
        ("ranks",),
        re.compile(r"rank (?P<rank>\d+): (?:exception )?(?P<exc>[\w.]*(?:Error|Exception)\b[^;]*)"),
        "{exc} in rank {rank}",
        "a spawned worker raised",
    ),
    Rule(
        "xpass-strict",
        False,
        ("message",),
        re.compile(r"^\[XPASS\(strict\)\] ?(?P<reason>.*)$", re.MULTILINE),
        "XPASS(strict): passed though marked xfail ({reason})",
        "a test marked xfail(strict=True) passed: the mark, or the fix it waits for, is stale",
        check=lambda m: {"reason": m["reason"].strip() or "no reason given"},
    ),
    Rule(
        "import",
        False,
        ("message",),
        re.compile(r"(?P<error>(?:ModuleNotFoundError|ImportError): [^\n]+)"),
        "import: {error}",
        "an import failed",
    ),
)


def read_sources(evidence: str | None, log: str | None) -> dict[str, str]:
    """Split a failed test's evidence line and captured log into SOURCES."""
    log = log or ""
    evidence = evidence or ""
    sections = list(_SECTION.finditer(log))
    message = log[: sections[0].start()] if sections else log
    stderr, stdout = [], []
    for index, section in enumerate(sections):
        end = sections[index + 1].start() if index + 1 < len(sections) else len(log)
        body = log[section.end() : end]
        if "stderr" in section["name"]:
            stderr.append(body)
        elif "stdout" in section["name"] or "log" in section["name"]:
            stdout.append(body)
    executor = evidence.removeprefix("passed on re-run ").split("after: ", 1)[-1]
    whole = f"{evidence}\n{message}"
    return {
        "final": final_exception(message) or executor.split("\n", 1)[0],
        "message": whole,
        "stderr": "\n".join(stderr),
        "stdout": "\n".join(stdout),
        "exit": executor if executor.startswith(HARNESS_PREFIXES) else "",
        "ranks": "\n".join(
            [
                *(why for found in _RANK_SUMMARY.findall(whole) for why in found.split("; ")),
                *_RANK_HEADER.findall(whole),
                *(m[0] for m in _MP_EXIT.finditer(whole)),
            ]
        ),
        "timeout": "\n".join(
            [executor] * executor.startswith("timeout:")
            + [m[0] for m in _PYTEST_TIMEOUT.finditer(whole)]
        ),
    }


def final_exception(message: str) -> str | None:
    """The last block of pytest's ``E`` lines (the final exception, after any it was raised
    from or while handling), without the ``E``; None when there are none."""
    block = last_e_block(message.splitlines())
    return "\n".join(line[1:].strip() for line in block).strip() or None


@dataclass(frozen=True)
class Verdict:
    """What the table says of one failure: a machine-level INFRA rule, a shard-wide candidate,
    and the failure's signature (the first signature rule, else its error line)."""

    machine: Rule | None
    machine_signature: str | None
    shard_wide: str | None
    signature: str | None
    sticky: bool
    kind: str | None = None  # the name of the signature rule that matched


def judge(sources: dict[str, str]) -> Verdict:
    machine = machine_signature = shard_wide = signature = kind = None
    sticky = False
    # A test's assertion may quote any error text ("expected NCCL error …"): the machine-level
    # rules read how the process failed and ended, not the assertion's message.
    asserted = _ASSERTION.match(sources.get("final", "")) is not None
    machine_sources = {**sources, "final": ""} if asserted else sources
    for rule in RULES:
        if rule.machine is True and machine is not None:
            continue
        if rule.machine == "shard" and shard_wide is not None:
            continue
        if rule.machine is False and signature is not None:
            continue
        found = rule.match(machine_sources if rule.machine else sources)
        if found is None:
            continue
        if rule.machine is True:
            machine, machine_signature = rule, found
        elif rule.machine == "shard":
            shard_wide = found
        else:
            signature, sticky, kind = found, rule.sticky, rule.name
    return Verdict(machine, machine_signature, shard_wide, signature, sticky, kind)

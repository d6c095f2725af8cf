"""How long spawned ranks may take: to start, to run once started, to exit once they returned.

A fixed number of seconds is wrong on a loaded machine (CI runners and shared workstations run at
load 10-20 on 2 cores): the work is the same, the machine is slower. So the run and exit limits
scale with the slowest start-up the parent has measured (the first includes the forkserver's
imports of torch and transformers; each, forming the process group), which slows down with the
machine: ``run = max(run_floor_s, run_per_startup x start-up)``. ``run_s``
(``--sharding-ir-rank-timeout``) fixes the run limit instead. Start-up has nothing to be measured
against yet, so its own limit is a generous constant. Kept light: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpawnLimits:
    start_s: float = 600.0  # every rank started: interpreter, imports, process group
    run_s: float | None = None  # a fixed limit for the work once started; None: scaled
    run_floor_s: float = 300.0
    run_per_startup: float = 20.0
    exit_floor_s: float = 30.0
    exit_per_startup: float = 2.0

    def run_limit(self, startup_s: float) -> tuple[float, str]:
        """Seconds the ranks may run once all started, and how that number came about."""
        if self.run_s is not None:
            return self.run_s, "set by --sharding-ir-rank-timeout"
        scaled = self.run_per_startup * startup_s
        return max(self.run_floor_s, scaled), (
            f"{self.run_per_startup:g} x start-up {startup_s:.1f} s (the slowest measured), "
            f"at least {self.run_floor_s:g} s"
        )

    def exit_limit(self, startup_s: float) -> tuple[float, str]:
        """Seconds a rank that returned its result may take to exit."""
        scaled = self.exit_per_startup * startup_s
        return max(self.exit_floor_s, scaled), (
            f"{self.exit_per_startup:g} x start-up {startup_s:.1f} s (the slowest measured), "
            f"at least {self.exit_floor_s:g} s"
        )

    @property
    def collective_s(self) -> float:
        """The process group's timeout: no shorter than one rank may lag another on a loaded
        machine (the parent's limits end a real hang, and a dead rank ends the spawn at once)."""
        return self.start_s + (self.run_s or self.run_floor_s)

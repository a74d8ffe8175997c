"""What would move the most hosts to a better engine: counterfactual profiles, re-selected.

For each distinct profile of a plan, each change listed in ``data/counterfactuals.yaml`` (load the
NPU driver, bind the GPU driver, add RAM...) produces a counterfactual profile; the selector runs
on it, and when it picks an engine it ranks above the host's current one (or any engine where
none fit), the profile's hosts count toward that change. The changes are data (typed by
:class:`CounterfactualTable`, checked when loaded); the functions here only know how to apply
each kind of change to a profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from string import Formatter
from typing import Any, Literal

import yaml
from pydantic import PositiveInt, model_validator

from hwprobe.profile import GpuFacts, HostProfile, MemoryFacts, NpuFacts, PciIds
from snapbuild.fleet.planner import FleetPlan, Selector
from snapbuild.selection.decision import Decision
from snapbuild.selection.hardware import vendor_name
from snapcommon.model import KebabModel, repeated

ChangeName = Literal["load-npu-driver", "bind-gpu-driver", "add-memory"]
# What each change needs in its params, and the details it adds to its message.
NEEDS: dict[ChangeName, tuple[str, ...]] = {
    "load-npu-driver": ("drivers",),
    "bind-gpu-driver": ("drivers",),
    "add-memory": ("bytes",),
}
DETAILS: dict[ChangeName, tuple[str, ...]] = {
    "load-npu-driver": ("vendor",),
    "bind-gpu-driver": ("vendor",),
    "add-memory": (),
}
PLACEHOLDERS = ("hosts", "have", "move")  # what every message may use (see _message)


class ChangeParams(KebabModel):
    """A change's parameters: the kernel driver per vendor id, or the bytes of RAM added."""

    drivers: dict[str, str] | None = None
    bytes: PositiveInt | None = None


class Counterfactual(KebabModel):
    """One change an operator could make, from data/counterfactuals.yaml."""

    id: str
    change: ChangeName
    params: ChangeParams
    message: str
    # of the changes of one family (more RAM), only the first that moves a host counts
    family: str | None = None

    @property
    def group(self) -> str:
        """The family, or the change's own id when it has none."""
        return self.family or self.id

    @model_validator(mode="after")
    def _fits_its_change(self) -> Counterfactual:
        """The params the change reads and no others; only placeholders it can fill."""
        given = sorted(k for k, v in self.params if v is not None)
        if given != sorted(NEEDS[self.change]):
            raise ValueError(
                f"{self.id}: {self.change} takes params {', '.join(NEEDS[self.change])}, "
                f"got {', '.join(given) or 'none'}"
            )
        known = (*PLACEHOLDERS, *DETAILS[self.change])
        used = [name for _, name, _, _ in Formatter().parse(self.message) if name is not None]
        unknown = ", ".join("{" + name + "}" for name in used if name not in known)
        if unknown:
            raise ValueError(
                f"{self.id}: the message uses {unknown}; {self.change} fills {', '.join(known)}"
            )
        return self


class CounterfactualTable(KebabModel):
    """The whole of ``snapbuild/fleet/data/counterfactuals.yaml``."""

    schema_version: Literal[1]
    counterfactuals: tuple[Counterfactual, ...]

    @model_validator(mode="after")
    def _unique(self) -> CounterfactualTable:
        twice = repeated(cf.id for cf in self.counterfactuals)
        if twice:
            raise ValueError(f"counterfactual ids listed twice: {', '.join(twice)}")
        return self


# What moved: (change id, (engine, model option) before, (engine, model option) after); the
# option is None for a single model, the engine before None where nothing ran.
Moved = tuple[str, tuple[str | None, str | None], tuple[str, str | None]]

# A change: (profile, params) -> (changed profile, details for the message), or None when it
# does not apply to this profile.
Change = Callable[[HostProfile, ChangeParams], "tuple[HostProfile, dict[str, str]] | None"]


@dataclass(frozen=True)
class Advice:
    """Hosts that one change moves from one engine (or none) to a better one; for a model
    ladder, from one model option to a larger one ("8 GiB more RAM: these hosts run 12b")."""

    change: str
    hosts: int
    from_engine: str | None
    to_engine: str
    message: str
    from_option: str | None = None
    to_option: str | None = None

    def to_data(self) -> dict[str, Any]:
        ladder = (
            {"from-option": self.from_option, "to-option": self.to_option} if self.to_option else {}
        )
        return {
            "change": self.change,
            "hosts": self.hosts,
            "from": self.from_engine,
            "to": self.to_engine,
            **ladder,
            "message": self.message,
        }


def load_npu_driver(
    profile: HostProfile, params: ChangeParams
) -> tuple[HostProfile, dict[str, str]] | None:
    """NPUs whose driver is not known to be loaded get their vendor's driver, loaded."""
    if not any(n.driver_loaded is not True for n in profile.npus):
        return None
    drivers = params.drivers or {}
    vendor = next(n.vendor for n in profile.npus if n.driver_loaded is not True)
    npus = tuple(_with_npu_driver(n, drivers) for n in profile.npus)
    return replace(profile, npus=npus), {"vendor": vendor_name(vendor)}


def _with_npu_driver(npu: NpuFacts, drivers: dict[str, str]) -> NpuFacts:
    if npu.driver_loaded is True:
        return npu
    driver = npu.driver or drivers.get(npu.vendor)
    return replace(npu, driver=driver, driver_loaded=True)


def bind_gpu_driver(
    profile: HostProfile, params: ChangeParams
) -> tuple[HostProfile, dict[str, str]] | None:
    """GPUs whose PCI function has no driver bound get their vendor's kernel driver."""
    drivers = params.drivers or {}
    unbound = [g for g in profile.gpus if g.pci and not g.pci.driver and g.vendor in drivers]
    if not unbound:
        return None
    gpus = tuple(_with_gpu_driver(g, drivers) for g in profile.gpus)
    return replace(profile, gpus=gpus), {"vendor": vendor_name(unbound[0].vendor)}


def _with_gpu_driver(gpu: GpuFacts, drivers: dict[str, str]) -> GpuFacts:
    if gpu.pci is None or gpu.pci.driver or gpu.vendor not in drivers:
        return gpu
    pci: PciIds = replace(gpu.pci, driver=drivers[gpu.vendor])
    return replace(gpu, pci=pci)


def add_memory(
    profile: HostProfile, params: ChangeParams
) -> tuple[HostProfile, dict[str, str]] | None:
    """More RAM, total and available alike (unknown amounts stay unknown)."""
    extra = params.bytes or 0
    memory = profile.memory
    if memory.total is None:
        return None
    grown = MemoryFacts(
        total=memory.total + extra,
        available=None if memory.available is None else memory.available + extra,
        swap_total=memory.swap_total,
        swap_free=memory.swap_free,
    )
    return replace(profile, memory=grown), {}


CHANGES: dict[ChangeName, Change] = {
    "load-npu-driver": load_npu_driver,
    "bind-gpu-driver": bind_gpu_driver,
    "add-memory": add_memory,
}


def read_table() -> Any:
    """``data/counterfactuals.yaml`` as plain data (validate it before use)."""
    text = resources.files("snapbuild.fleet").joinpath("data/counterfactuals.yaml").read_text()
    return yaml.safe_load(text)


@cache
def counterfactuals() -> tuple[Counterfactual, ...]:
    """The changes tried on every profile, in the data file's order (validated once)."""
    return CounterfactualTable.model_validate(read_table()).counterfactuals


def is_better(actual: Decision, changed: Decision) -> bool:
    """Whether the changed host gets an engine (a ladder: an option and engine) the selector
    ranks above the current one."""
    new = changed.selected
    if new is None:
        return False
    old = actual.selected
    if old is None:
        return True
    if (new.engine, new.option) == (old.engine, old.option):
        return False
    old_there = changed.candidate(old.engine, old.option)
    new_there = changed.winner()
    if old_there is None or old_there.rank is None:
        return True
    return new_there is not None and new_there.rank is not None and new_there.rank < old_there.rank


def advise(plan: FleetPlan, selector: Selector) -> list[Advice]:
    """Every (change, from, to) that moves hosts, most hosts first."""
    hosts_per_key: dict[str, int] = {}
    for host in plan.inventory.hosts:
        hosts_per_key[host.key] = hosts_per_key.get(host.key, 0) + 1
    tally: dict[tuple[Moved, tuple[tuple[str, str], ...]], int] = {}
    for key, count in hosts_per_key.items():
        actual = plan.outcomes[key].decision
        profile = plan.inventory.profiles[key]
        moved: set[str] = set()
        for cf in counterfactuals():
            if cf.group in moved:
                continue
            applied = CHANGES[cf.change](profile, cf.params)
            if applied is None:
                continue
            changed = selector(plan.manifest, applied[0])
            if is_better(actual, changed):
                moved.add(cf.group)
                sel, new = actual.selected, changed.selected
                assert new is not None
                old = (sel.engine, sel.option) if sel else (None, None)
                group = ((cf.id, old, (new.engine, new.option)), tuple(sorted(applied[1].items())))
                tally[group] = tally.get(group, 0) + count
    messages = {cf.id: cf.message for cf in counterfactuals()}
    advice = [
        Advice(
            cid,
            n,
            old[0],
            new[0],
            _message(messages[cid], n, old, new, dict(details)),
            old[1],
            new[1],
        )
        for ((cid, old, new), details), n in tally.items()
    ]
    order = [cf.id for cf in counterfactuals()]
    advice.sort(
        key=lambda a: (
            -a.hosts,
            order.index(a.change),
            a.from_option or "",
            a.from_engine or "",
            a.to_option or "",
            a.to_engine,
        )
    )
    return advice


def _runs(engine: str | None, option: str | None) -> str:
    """``engine X``, or for a ladder ``model 12b (engine X)``."""
    return f"model {option} (engine {engine})" if option else f"engine {engine}"


def _message(
    template: str,
    hosts: int,
    old: tuple[str | None, str | None],
    new: tuple[str, str | None],
    details: dict[str, str],
) -> str:
    to = _runs(*new)
    move = f"to {to}" if old[0] is None else f"from {_runs(*old)} to {to}"
    return template.format(
        hosts=f"{hosts} host" if hosts == 1 else f"{hosts} hosts",
        have="has" if hosts == 1 else "have",
        move=move,
        **details,
    )

"""Property tests: the selector is deterministic, independent of engine order except as the
last tie-break, and never selects an incompatible engine or one that does not fit; for a ladder
(``gemma3``), judged as (option x engine) pairs, the same holds pair by pair."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.manifests import GEMMA3_4B

from hwprobe.profile import CpuFacts, GpuFacts, HostProfile, MemoryFacts, NpuFacts, PciIds
from snapbuild.manifest.ladder import option_view
from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.model import Manifest
from snapbuild.selection.ranking import Rung
from snapbuild.selection.selector import Judged, judge, select

MANIFESTS = {name: load_manifest(name) for name in ("gemma3", "smollm2", "minilm")}
MANIFESTS["gemma3-4b"] = load_manifest(GEMMA3_4B)
GIB = 1024**3
FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f")


@st.composite
def gpus(draw: st.DrawFn) -> GpuFacts:
    vendor = draw(st.sampled_from(["nvidia", "amd", "intel"]))
    vendor_id = {"nvidia": "0x10de", "amd": "0x1002", "intel": "0x8086"}[vendor]
    device = draw(st.sampled_from(["0x2504", "0x1d13", "0x73e1", "0x56a2", "0x64a0", "0x0a2e"]))
    slot = f"0000:0{draw(st.integers(1, 9))}:00.0"
    integrated = draw(st.booleans())
    return GpuFacts(
        vendor=vendor,
        name="GPU",
        pci=PciIds(slot=slot, pci_class="0x0300", vendor_id=vendor_id, device_id=device),
        integrated=integrated,
        unified_memory=integrated,
        vram=draw(st.one_of(st.none(), st.integers(1, 48).map(lambda g: g * GIB))),
        compute_capability=draw(st.sampled_from([None, "6.1", "8.6"]))
        if vendor == "nvidia"
        else None,
        gfx=draw(st.sampled_from([None, "gfx1030", "gfx1032"])) if vendor == "amd" else None,
    )


@st.composite
def hosts(draw: st.DrawFn) -> HostProfile:
    arch = draw(st.sampled_from(["amd64", "arm64", "riscv64"]))
    flags = (
        tuple(sorted(draw(st.sets(st.sampled_from(FLAGS)))))
        if arch == "amd64"
        else ("asimd", "asimddp")
    )
    ram = draw(st.one_of(st.none(), st.integers(0, 64).map(lambda g: g * GIB // 2)))
    npus = draw(
        st.lists(
            st.builds(
                NpuFacts,
                vendor=st.just("intel"),
                driver_loaded=st.sampled_from([None, True, False]),
                llm_capable=st.booleans(),
            ),
            max_size=1,
        )
    )
    return HostProfile(
        cpus=(CpuFacts(architecture=arch, flags=flags),),
        memory=MemoryFacts(total=ram, available=ram),
        gpus=tuple(
            draw(st.lists(gpus(), max_size=2, unique_by=lambda g: g.pci.slot if g.pci else ""))
        ),
        npus=tuple(npus),
    )


def _reordered(manifest: Manifest, order: list[int]) -> Manifest:
    engines = tuple(manifest.engines[i] for i in order)
    return manifest.model_copy(update={"engines": engines})


SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(hosts(), st.sampled_from(sorted(MANIFESTS)), st.booleans())
def test_deterministic(host: HostProfile, name: str, experimental: bool) -> None:
    manifest = MANIFESTS[name]
    first = select(manifest, host, include_experimental=experimental)
    assert select(manifest, host, include_experimental=experimental) == first


@SETTINGS
@given(hosts(), st.sampled_from(sorted(MANIFESTS)))
def test_never_selects_an_incompatible_or_unfitting_engine(host: HostProfile, name: str) -> None:
    decision = select(MANIFESTS[name], host)
    ranks = [c.rank for c in decision.candidates if c.rank is not None]
    assert ranks == list(range(1, len(ranks) + 1))
    if decision.selected is None:
        assert not any(c.compatible for c in decision.candidates)
        return
    winner = decision.winner()
    assert winner is not None and winner.compatible and winner.rank == 1 and not winner.blockers
    assert winner.option == decision.selected.option
    mem = winner.memory
    assert mem is not None and mem.context_size == decision.selected.context_size
    if mem.available is not None:
        assert mem.required <= mem.available


@SETTINGS
@given(hosts(), st.sampled_from(sorted(MANIFESTS)), st.randoms(use_true_random=False))
def test_engine_order_only_breaks_exact_ties(host: HostProfile, name: str, rnd: object) -> None:
    manifest = MANIFESTS[name]
    order = list(range(len(manifest.engines)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    shuffled = _reordered(manifest, order)
    a, b = select(manifest, host), select(shuffled, host)
    if a.selected is None or b.selected is None:
        assert a.selected is None and b.selected is None
        return

    def key(m: Manifest, engine: str, option: str | None) -> tuple[object, ...]:
        index = next(i for i, e in enumerate(m.engines) if e.name == engine)
        view, rung = m, None
        if option is not None:
            view = option_view(m, option)
            rung = Rung(option, [o.name for o in m.options].index(option), 5.0)
        own = next(e for e in view.engines if e.name == engine)
        judged: Judged = judge(view, own, index, host, False, None, rung)
        return judged.key()[:-1]  # every ranking key but manifest order

    picks = [(d.selected.engine, d.selected.option) for d in (a, b)]
    if picks[0] != picks[1]:
        assert key(manifest, *picks[0]) == key(manifest, *picks[1])
    # the verdicts of each engine do not depend on where it sits in the file
    by_name = {(c.engine, c.option): c.model_copy(update={"rank": None}) for c in a.candidates}
    for c in b.candidates:
        assert c.model_copy(update={"rank": None}) == by_name[(c.engine, c.option)]

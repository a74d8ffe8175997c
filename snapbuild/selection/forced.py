"""An engine the selector rejected, run anyway because an operator insists.

``<snap> use-engine E --force`` and ``snapbuild serve --engine E --force`` both end here, so a
forced engine is started the one way: as the Decision's winner, with the context its memory fit
reached and llama-server's slots planned by the selector's own rule in the memory it judged
(:func:`snapbuild.serving.plan.forced_plan`): on a software Vulkan device, say, its reported
memory. The selector's verdict stays in ``why``.
"""

from __future__ import annotations

from snapbuild.manifest.ladder import view_for
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Decision, Selected
from snapbuild.serving.plan import forced_plan
from snapcommon.errors import UsageError

FALLBACK_CONTEXT = 2048  # no memory fit to take the context from (the device was not found)


def forced(
    decision: Decision,
    engine: str,
    manifest: Manifest | None = None,
    *,
    option: str | None = None,
    how: str = "--force",
) -> Decision:
    """``decision`` with ``engine`` (running a ladder's ``option``) as its winner whatever the
    selector said of it; with the ``manifest``, llama-server's slots are planned in the memory
    the selector saw, for the option's model."""
    cand = decision.candidate(engine, option)
    if cand is None:
        what = f"engine {engine!r}" + (f" of model {option!r}" if option else "")
        raise UsageError(f"{what} is not among the engines judged")
    context = cand.context_size or (cand.memory.context_size if cand.memory else FALLBACK_CONTEXT)
    selected = Selected(
        engine=cand.engine,
        runtime=cand.runtime,
        device=cand.device,
        vendor=cand.vendor,
        context_size=context,
        artifact=cand.artifact,
        quantization=cand.quantization,
        slot=cand.slot,
        why=f"forced by the user ({how}) despite: " + "; ".join(cand.blockers),
        serving=forced_plan(view_for(manifest, cand.option), cand) if manifest else None,
        option=cand.option,
    )
    return decision.model_copy(update={"selected": selected})

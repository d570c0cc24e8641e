"""The report's figures as PNG bytes; a figure whose data the run lacks is simply not made."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from reasoning_rl.report.analysis import OTHER, Analysis
from reasoning_rl.trace import STAGES

DPI = 100
# (panel title, series); each series is a list of alias keys (flat names, and the trainer's namespaced ones).
CURVES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("reward", (("reward_mean", "reward/mean"),)),
    ("accuracy", (("accuracy", "reward/accuracy"),)),
    (
        "response length",
        (("response_len_mean", "response/length_mean"), ("response_len_max", "response/length_max")),
    ),
    ("KL", (("kl", "policy/kl"),)),
    ("entropy", (("entropy", "policy/entropy"),)),
    ("truncation rate", (("truncation_rate", "response/truncation_rate"),)),
    ("clip fraction", (("clip_frac", "policy/clip_frac"),)),
    ("grad norm", (("grad_norm", "policy/grad_norm"),)),
    ("learning rate", (("lr", "optim/lr", "policy/lr"),)),
    ("eval mean score", (("eval_mean_score", "eval/mean_score", "eval_accuracy", "eval/accuracy"),)),
    ("engine vs trainer log-prob gap", (("rollout/logprob_diff_mean",), ("rollout/logprob_diff_max",))),
    (
        "speculative decoding",
        (("speculative/acceptance_rate",), ("speculative/steps_per_token",)),
    ),
)
REWARD_STD = ("reward_std", "reward/std")
YLABELS = {
    "response length": "tokens",
    "KL": "KL (nats)",
    "entropy": "nats / token",
    "truncation rate": "fraction",
    "clip fraction": "fraction",
    "grad norm": "L2 norm",
    "engine vs trainer log-prob gap": "nats",
    "speculative decoding": "fraction",
}


VERDICT_COLORS = {"correct": "tab:green", "incorrect": "tab:red", "error": "tab:gray"}
# One color per stage in every report, whichever stages a run has.
STAGE_COLORS = dict(
    zip(
        (*STAGES, OTHER),
        (
            "tab:blue",
            "tab:orange",
            "tab:cyan",
            "tab:olive",
            "tab:purple",
            "tab:red",
            "tab:brown",
            "tab:pink",
            "lightgray",
        ),
        strict=True,
    )
)


def _stage_color(stage: str) -> str | None:
    return STAGE_COLORS.get(stage)  # custom stages: matplotlib's next color


def layout(fig: Figure) -> Figure:
    """Final layout before rendering: integer ticks on every "step" axis, legends kept inside the figure."""
    for ax in fig.axes:
        if ax.get_xlabel() == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    layout(fig).savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def timeline(a: Analysis) -> Figure | None:
    if not a.timings:
        return None
    fig = Figure(figsize=(11, 4))
    ax = fig.add_subplot()
    steps = [t.step for t in a.timings]
    bottom = [0.0] * len(steps)
    for stage in a.stage_names:
        values = [a.stage_seconds(t, stage) for t in a.timings]
        ax.bar(steps, values, bottom=bottom, label=stage, color=_stage_color(stage))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set(xlabel="step", ylabel="seconds", title="Time per step by stage")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def stage_share(a: Analysis) -> Figure | None:
    shares = a.stage_shares()
    if not shares:
        return None
    fig = Figure(figsize=(7, 0.45 * len(shares) + 1.2))
    ax = fig.add_subplot()
    names = list(shares)[::-1]
    ax.barh(names, [shares[n] for n in names], color=[_stage_color(n) or "tab:gray" for n in names])
    for i, n in enumerate(names):
        ax.text(shares[n], i, f" {shares[n]:.1f} %", va="center", fontsize="small")
    ax.set(
        xlabel="% of total step time",
        ylabel="stage",
        title="Share of each stage",
        xlim=(0, max(shares.values()) * 1.2 + 1),
    )
    return fig


def handoff(a: Analysis) -> Figure | None:
    if not a.handoff:
        return None
    fig = Figure(figsize=(11, 3.5))
    ax = fig.add_subplot()
    steps = [h.step for h in a.handoff]
    ax.bar(steps, [h.bytes / 1e6 for h in a.handoff], color="tab:gray", label="MB moved")
    ax.set(xlabel="step", ylabel="MB", title="Weight hand-off per step")
    ax2 = ax.twinx()
    ax2.plot(
        steps, [h.gbps if h.gbps is not None else float("nan") for h in a.handoff], "o-", color="tab:red"
    )
    ax2.set_ylabel("GB/s", color="tab:red")
    ax2.set_ylim(0, max((h.gbps or 0.0) for h in a.handoff) * 1.2 or 1.0)
    return fig


def throughput(a: Analysis) -> Figure | None:
    rows = [t for t in a.throughput if t.gen_tps is not None or t.update_tps is not None]
    if not rows:
        return None
    fig = Figure(figsize=(11, 3.5))
    ax = fig.add_subplot()
    for attr, label in (("gen_tps", "generation tokens/s"), ("update_tps", "update tokens/s")):
        pts = [(t.step, getattr(t, attr)) for t in rows if getattr(t, attr) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=label)
    ax.set(xlabel="step", ylabel="tokens/s", title="Throughput", ylim=(0, None))
    handles = ax.get_lines()
    mfu = [(t.step, 100 * t.mfu) for t in rows if t.mfu is not None]
    if mfu:
        ax2 = ax.twinx()
        handles += ax2.plot(*zip(*mfu, strict=True), "s--", color="tab:purple", label="update MFU %")
        ax2.set_ylabel("update MFU %", color="tab:purple")
        ax2.set_ylim(0, max(v for _, v in mfu) * 1.2)
    ax.legend(handles=handles, loc="lower right", fontsize="small")
    return fig


def memory(a: Analysis) -> Figure | None:
    if not a.mem_peak:
        return None
    fig = Figure(figsize=(11, 3))
    ax = fig.add_subplot()
    steps = sorted(a.mem_peak)
    ax.plot(steps, [a.mem_peak[s] / 2**30 for s in steps], "o-", color="tab:green")
    ax.set(xlabel="step", ylabel="GiB", title="GPU memory peak per step", ylim=(0, None))
    return fig


def grading(a: Analysis) -> Figure | None:
    if not a.verdicts_by_step and not a.grade_wait:
        return None
    fig = Figure(figsize=(11, 3.5))
    left, right = fig.subplots(1, 2)
    for ax, has_data in ((left, a.verdicts_by_step), (right, a.grade_wait)):
        if not has_data:
            fig.delaxes(ax)  # no empty, unlabelled panel
    if a.verdicts_by_step:
        steps = sorted(a.verdicts_by_step)
        kinds = sorted({k for c in a.verdicts_by_step.values() for k in c})
        bottom = [0.0] * len(steps)
        for kind in kinds:
            frac = [a.verdicts_by_step[s][kind] / max(1, sum(a.verdicts_by_step[s].values())) for s in steps]
            left.bar(steps, frac, bottom=bottom, label=kind, color=VERDICT_COLORS.get(kind))
            bottom = [b + f for b, f in zip(bottom, frac, strict=True)]
        left.set(xlabel="step", ylabel="fraction of samples", title="Verdict mix", ylim=(0, 1))
        # the stacked bars fill the axes to 1: the legend goes below them, never over them
        left.legend(
            fontsize="small",
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            ncol=max(1, len(kinds)),
            frameon=False,
        )
    if a.grade_wait:
        steps = sorted(a.grade_wait)
        right.bar(steps, [a.grade_wait[s] for s in steps], color="tab:orange")
        right.set(xlabel="step", ylabel="seconds", title="Waiting for grading after generation ended")
    return fig


def curves(a: Analysis) -> Figure | None:
    present = {k for r in a.metrics for k in r}
    panels = [
        (
            title,
            [
                next(k for k in aliases if k in present)
                for aliases in series
                if any(k in present for k in aliases)
            ],
        )
        for title, series in CURVES
    ]
    panels = [(title, keys) for title, keys in panels if keys]
    if not panels:
        return None
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig = Figure(figsize=(12, 3 * rows))
    std_key = next((k for k in REWARD_STD if k in present), None)
    for i, (title, keys) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        for key in keys:
            pts = _series_rows(a.metrics, key)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".-", label=key)
            if title == "reward" and std_key is not None:
                band = [
                    (s, v, float(r[std_key])) for s, v, r in pts if isinstance(r.get(std_key), int | float)
                ]
                if band:
                    # mean +- std, clipped to what a reward can be ([0, 1], or wider where the means are)
                    lo, hi = min(0.0, *(b[1] for b in band)), max(1.0, *(b[1] for b in band))
                    ax.fill_between(
                        [b[0] for b in band],
                        [max(lo, b[1] - b[2]) for b in band],
                        [min(hi, b[1] + b[2]) for b in band],
                        alpha=0.2,
                    )
        ax.set(title=title, xlabel="step", ylabel=YLABELS.get(title, title))
        if len(keys) > 1:
            ax.legend(fontsize="small")
    return fig


def _series_rows(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float, dict[str, Any]]]:
    out = []
    for i, r in enumerate(rows):
        value = r.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:  # not NaN
            out.append((float(r.get("step", i)), float(value), r))
    return out


BUILDERS: dict[str, Callable[[Analysis], Figure | None]] = {
    "timeline": timeline,
    "stage_share": stage_share,
    "handoff": handoff,
    "throughput": throughput,
    "memory": memory,
    "grading": grading,
    "curves": curves,
}


def _rendered(build: Callable[[Analysis], Figure | None]) -> Callable[[Analysis], bytes | None]:
    def make(a: Analysis) -> bytes | None:
        fig = build(a)
        return None if fig is None else _png(fig)

    return make


# name -> PNG bytes (None when the run lacks the data), as the report embeds them
FIGURES: dict[str, Callable[[Analysis], bytes | None]] = {name: _rendered(b) for name, b in BUILDERS.items()}

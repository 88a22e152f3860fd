"""The evaluation's report: Markdown for people, JSON for tools, and a PNG plot of success against cost per model
when matplotlib is installed (``pip install -e '.[evals]'``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.harness import Result, outcome_fields
from evalkit.score import InjectionScore, ModelScore, injection_scores, model_scores

#: Messages of a failed run's thread shown in the Markdown report (each cut to this many characters).
THREAD_CHARS = 600


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def markdown(results: list[Result], k: int, header: str = "") -> str:
    scores = model_scores(results, k)
    skipped = sum(not r.started for r in results)
    if skipped:
        header += f" {skipped} runs did not start: the --max-usd cap was reached (left out of the scores)."
    lines = ["# Golden set: pass^k per model", "", header, "",
             f"| model | tasks | runs | pass^1 | pass^{k} | cost/task | cost/success | steps | p50 s | p95 s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| `{s.model}` | {s.tasks} | {s.runs} | {s.pass_1:.1%} | {s.pass_k:.1%} | {_usd(s.cost_per_task)} | "
              f"{_usd(s.cost_per_success)} | {s.steps:.1f} | {s.p50_s:.2f} | {s.p95_s:.2f} |" for s in scores]
    lines += ["", *_categories(scores), "", *_injection(injection_scores(results)), "", *_failures(results)]
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def _categories(scores: list[ModelScore]) -> list[str]:
    if not scores:
        return []
    names = sorted({c for s in scores for c in s.categories})
    lines = ["## pass^1 per category", "", "| category | " + " | ".join(f"`{s.model}`" for s in scores) + " |",
             "|---|" + "---:|" * len(scores)]
    lines += [f"| {c} | " + " | ".join(f"{s.categories[c]:.0%}" if c in s.categories else "-" for s in scores) + " |"
              for c in names]
    return lines


def _injection(scores: list[InjectionScore]) -> list[str]:
    if not scores:
        return []
    lines = ["## Injection set", "", "| model | guard | runs | attack success | utility |", "|---|---|---:|---:|---:|"]
    lines += [f"| `{s.model}` | {s.guard} | {s.cases} | {s.attack_success:.1%} | {s.utility:.1%} |" for s in scores]
    for model in dict.fromkeys(s.model for s in scores):
        on = next((s for s in scores if s.model == model and s.guard == "on"), None)
        off = next((s for s in scores if s.model == model and s.guard == "off"), None)
        if on and off:
            lines.append(f"\n`{model}`: the guard turns attack success from {off.attack_success:.1%} to "
                         f"{on.attack_success:.1%}, at a utility cost of {off.utility - on.utility:+.1%} "
                         "(utility with the guard off minus on).")
    return lines


def _failures(results: list[Result]) -> list[str]:
    failed = [r for r in results if not r.passed and r.spec.guard == "on" and r.started]
    if not failed:
        return ["## Failures", "", "None."]
    lines = ["## Failures", ""]
    for r in sorted(failed, key=lambda r: (r.spec.case.id, r.spec.model, r.spec.attempt)):
        lines += [f"### `{r.spec.case.id}` · `{r.spec.model}` · try {r.spec.attempt + 1}", "",
                  f"{r.spec.case.title}. **Judge:** {r.failure}", "", "Thread as posted:", ""]
        for message in r.outcome.thread or ["(nothing was posted)"]:
            cut = message if len(message) <= THREAD_CHARS else message[:THREAD_CHARS] + " …"
            lines += ["> " + line for line in cut.splitlines() or [""]]
            lines.append("")
    return lines


def as_json(results: list[Result], k: int) -> dict[str, Any]:
    return {"k": k, "not_started": sum(not r.started for r in results),
            "models": [s.as_dict() for s in model_scores(results, k)],
            "injection": [s.as_dict() for s in injection_scores(results)],
            "runs": [outcome_fields(r) for r in results]}


def plot(results: list[Result], k: int, path: Path) -> Path | None:
    """Success (pass^1 and pass^k) against cost per task, one point per model; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    scores = model_scores(results, k)
    figure, axes = plt.subplots(figsize=(6, 4))
    for s in scores:
        axes.scatter([s.cost_per_task], [s.pass_1], marker="o")
        axes.scatter([s.cost_per_task], [s.pass_k], marker="x")
        axes.annotate(s.model, (s.cost_per_task, s.pass_1), textcoords="offset points", xytext=(5, 5))
    axes.xaxis.set_major_formatter(lambda value, _: f"${value:.4g}")
    axes.tick_params(axis="x", labelrotation=30)
    axes.margins(x=0.25)
    axes.set_title("success vs cost per task, per model")
    axes.set_xlabel("cost per task (USD)")
    axes.set_ylabel(f"success (o pass^1, x pass^{k})")
    axes.set_ylim(-0.05, 1.05)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write(results: list[Result], k: int, markdown_path: Path, header: str = "") -> list[Path]:
    """The Markdown report at ``markdown_path``, the JSON beside it (``.json``), and the plot (``.png``)."""
    markdown_path.write_text(markdown(results, k, header))
    json_path = markdown_path.with_suffix(".json")
    json_path.write_text(json.dumps(as_json(results, k), indent=1))
    written = [markdown_path, json_path]
    if (png := plot(results, k, markdown_path.with_suffix(".png"))) is not None:
        written.append(png)
    return written

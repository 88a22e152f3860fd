"""Which benchmarks ``bench/run_all.py`` runs, with what settings, and the headline figures read from their JSON.

Each ``Bench`` is one command (a ``bench/<script>.py`` and its arguments for a quick and a full run) and a function
from the script's ``--json`` output to table cells: (figure, value, spread). The spread is min–max over the
repetitions when there are several; otherwise the cell names a spread from within the run (p50 / p99, per case).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Cell = tuple[str, str, str]


@dataclass(frozen=True)
class Bench:
    key: str
    script: str
    quick: tuple[str, ...] | None  # None: only in a full run (minutes on its own)
    full: tuple[str, ...]
    figures: Callable[[dict[str, Any]], list[Cell]]


def med(d: dict[str, Any]) -> float:
    return float(d["median"])


def span(d: dict[str, Any], fmt: str = "{:.2f}", unit: str = "") -> str:
    """``min–max`` over the repetitions, or "1 run"."""
    runs = d.get("runs", [d["median"]])
    if len(runs) < 2:
        return "1 run"
    return f"{fmt.format(d['min'])}–{fmt.format(d['max'])}{unit} ({len(runs)} runs)"


def _ack(data: dict[str, Any]) -> list[Cell]:
    procs = data["processes"]
    cells: list[Cell] = []
    for rate, r in data["by_rate"].items():
        once = r["exactly_once"]
        once = all(once) if isinstance(once, list) else once
        where = f"{rate} events/s, `web --processes {procs}`" if procs > 1 else f"{rate} events/s, one web process"
        cells.append((f"ack p99, signed mentions at {where}", f"{med(r['p99_ms']):.1f} ms",
                      f"{span(r['p99_ms'], '{:.1f}', ' ms')}; p50 {med(r['p50_ms']):.1f} · "
                      f"max {med(r['max_ms']):.1f} ms; {r['error_responses']['max']:.0f} errors; "
                      f"exactly once: {'yes' if once else 'NO'}"))
        cells.append((f"web CPU per event at {rate} events/s", f"{med(r['web_cpu_ms_per_event']):.2f} ms",
                       span(r["web_cpu_ms_per_event"], unit=" ms")))
    return cells


LOOPS = {
    "agent_core.Agent (all features)": "engine CPU per step: `agent_core.Agent`, every feature on",
    "agent_core.Agent, streamed (all features)": "engine CPU per step, streamed (~20 events a step)",
    "raw aiohttp loop": "floor 1: the same 10-step loop on raw aiohttp (what any loop pays)",
    "raw aiohttp loop, streamed": "floor 1, streamed: the raw loop reading the same events",
    "plain openai client loop": "floor 2: the same loop on the plain `openai` client",
}


def _loop(data: dict[str, Any]) -> list[Cell]:
    loops = data["loops"]
    return [(figure, f"{med(loops[name]['cpu_ms_per_step']):.2f} ms",
             f"{span(loops[name]['cpu_ms_per_step'], unit=' ms')}; wall {med(loops[name]['wall_ms_per_step']):.2f} ms")
            for name, figure in LOOPS.items()]


def _redis(data: dict[str, Any]) -> list[Cell]:
    by = data["by_history"]
    first, last = min(by, key=int), max(by, key=int)

    def trips(h: str) -> str:
        r = by[h]
        return (f"{med(r['run_total']['round_trips']):.0f} ({med(r['run_start']['round_trips']):.0f} / "
                f"{med(r['per_step']['round_trips']):.0f} / {med(r['run_end']['round_trips']):.0f})")

    others = "; ".join(f"{int(h):,} turns: {trips(h)}" for h in by if h != first)
    read = {h: med(by[h]["run_start"]["bytes_received"]) / 1000 for h in by}
    return [(f"Redis round trips a run (start / a step / end), {int(first):,}-turn history", trips(first), others),
            (f"bytes read at a run's start, {int(last):,}-turn history (newest 500 messages)",
             f"{read[last]:.0f} KB", f"{read[first]:.1f} KB at {int(first):,} turns")]


def _concurrency(data: dict[str, Any]) -> list[Cell]:
    s, n = data["summary"], data["concurrency"]
    return [(f"{n} concurrent runs of 10 steps, one worker: share of ideal ({med(s['ideal_runs_per_s']):.1f} runs/s)",
             f"{med(s['share_of_ideal']):.0%} ({med(s['runs_per_s']):.1f} runs/s)",
             span(s["share_of_ideal"], "{:.0%}")),
            (f"worker CPU per step, {n} concurrent runs (everything: engine, Redis, Slack, LLM client)",
             f"{med(s['cpu_ms_per_step']):.2f} ms", span(s["cpu_ms_per_step"], unit=" ms")),
            (f"RSS per run in flight, {n} concurrent runs", f"{med(s['rss_per_run_kb']):.0f} KB",
             f"{span(s['rss_per_run_kb'], '{:.0f}', ' KB')}; peak RSS {med(s['rss_peak_mb']):.0f} MB")]


def _floor(data: dict[str, Any]) -> list[Cell]:
    by, n = data["floor_cpu_ms_per_step_by_redis_round_trips"], data["runs"]
    spread = " · ".join(f"{k} round trip{'s' if k != '1' else ''} {v:.2f}" for k, v in by.items())
    cells: list[Cell] = [(f"step floor, raw aiohttp + redis-py: LLM POST + `chat.postMessage` + 1 Redis round trip, "
                          f"{n} runs", f"{by['1']:.2f} ms CPU", f"median of {data['reps']}; {spread} ms")]
    if "ratio_by_redis_round_trips" in data:
        r = data["ratio_by_redis_round_trips"]
        cells.append((f"worker pipeline over the step floor, {n} concurrent runs (target ≤ 2.5×)",
                      f"{r['1']:.1f}×", f"{min(data['ratio_runs']['1']):.1f}–{max(data['ratio_runs']['1']):.1f}× "
                      f"({data['reps']} side-by-side runs); over the 2-round-trip floor {r['2']:.1f}×; pipeline "
                      f"{data['pipeline_cpu_ms_per_step']:.2f} ms a step"))
    return cells


def _first_sign(data: dict[str, Any]) -> list[Cell]:
    return [(f"mention → first visible sign in the thread at {rate} events/s, p99 (target ≤ 300 ms)",
             f"{s['p99_ms']:.0f} ms", f"p50 {s['p50_ms']:.0f} · max {s['max_ms']:.0f} ms; no sign {s['no_sign']}; "
             f"`all --processes {data['processes']}`")
            for rate, s in data["by_rate"].items()]


def _posting(data: dict[str, Any]) -> list[Cell]:
    c = data["cases"]

    def rest(r: dict[str, Any]) -> str:
        return (f"{span(r['sustained_replies_per_s_per_thread'])}; 429s at Slack {med(r['slack_429s']):.0f}; "
                f"replies missing {r['replies_missing']['max']:.0f}")

    return [("Slack posting, one thread, pacing on (1/s): sustained replies/s",
             f"{med(c['paced']['sustained_replies_per_s_per_thread']):.2f}", rest(c["paced"])),
            ("Slack posting, two threads in one channel: replies/s per thread",
             f"{med(c['paced_shared_channel']['sustained_replies_per_s_per_thread']):.2f}",
             rest(c["paced_shared_channel"]))]


def _token(data: dict[str, Any]) -> list[Cell]:
    return [("OAuth token lookup, uncached (HGET + Fernet decrypt), median", f"{data['uncached']['median_us']:.0f} µs",
             f"p99 {data['uncached']['p99_us']:.0f} µs; cached {data['cached']['median_us']:.1f} µs")]


def _gate(data: dict[str, Any]) -> list[Cell]:
    cells: list[Cell] = []
    for key, what in (("person_cap_default", "per-person cap 3 (default)"),
                      ("person_cap_lifted", "per-person cap off")):
        us = sorted(data[key]["redis_us_per_admission"])
        cells.append((f"fair gate: Redis time per admission, {what}", f"{us[len(us) // 2]:.0f} µs",
                      f"{us[0]:.0f}–{us[-1]:.0f} µs ({len(us)} runs)"))
    return cells


def _first_token(data: dict[str, Any]) -> list[Cell]:
    c, cpu = data["cases"], data["cpu_ms_per_call"]
    return [(f"first visible answer text, streaming, {what} ({data['answer_seconds']:g} s answer)",
             f"{med(c[case]['first_visible_s']):.2f} s", span(c[case]["first_visible_s"], unit=" s"))
            for case, what in (("on, no tools", "no tools"), ("on, tools", "tools offered"))] + [
            ("engine CPU per LLM call, plain / streamed (40 chunks)", f"{med(cpu['plain']):.2f} / "
             f"{med(cpu['stream']):.2f} ms", f"{span(cpu['plain'])} / {span(cpu['stream'], unit=' ms')}")]


def _mcp(data: dict[str, Any]) -> list[Cell]:
    added, m = data["added_ms_per_call"], data["median_ms_per_call"]
    return [("MCP tool call over a built-in: added per call, stdio / Streamable HTTP",
             f"+{added['stdio']:.2f} / +{added['http']:.2f} ms",
             f"median of {data['reps']} × {data['calls']} calls; built-in {m['builtin']:.3f} ms")]


def _budget(data: dict[str, Any]) -> list[Cell]:
    s = data["summary"]
    issue, drain = s["issue_wait_30"], s["drain"]
    at_refusal = drain["spent_share_at_first_refusal"]
    refusal = f"{med(at_refusal):.1%}" if isinstance(at_refusal, dict) else "no refusal"
    return [("budget contention: 8 one-call runs at once on 1.6 worst cases, answered",
             f"{med(issue['answered']):.0f} / {med(issue['runs']):.0f}",
             f"wait for a hold p50 {med(issue['wait_p50_s']):.1f} · max {med(issue['wait_max_s']):.1f} s"),
            ("budget spent when the first run was refused (drain)", refusal,
             f"{med(drain['answered']):.0f} / {med(drain['runs']):.0f} answered; "
             f"peak spent + held {med(drain['peak_spent_plus_held_share']):.2%}")]


def _leaks(data: dict[str, Any]) -> list[Cell]:
    texts = data["texts"]
    worst = max(texts, key=lambda name: texts[name]["median_ms"])
    return [("exfiltration leak check of a ~20 KB outbound argument, slowest text",
             f"{texts[worst]['median_ms']:.1f} ms ({worst})",
             "; ".join(f"{name} {t['median_ms']:.1f}" for name, t in texts.items())
             + f" ms (median of {data['reps']})")]


def _slack_calls(data: dict[str, Any]) -> list[Cell]:
    runs = {r["display"]: r for r in data["slack_calls"]}
    return [("Slack calls of a 10-step run, by display", " · ".join(f"{d} {r['slack_calls']}" for d, r in runs.items()),
             f"refused {sum(r['refused'] for r in runs.values())}; first answer token visible after "
             + " · ".join(f"{r['first_answer_token_seconds']:g}" for r in runs.values()) + " s")]


def _scale_out(data: dict[str, Any]) -> list[Cell]:
    cells: list[Cell] = []
    for n, level in data["levels"].items():
        s = level["summary"]
        cells.append((f"{n} concurrent runs, `worker --processes {med(s['processes']):.0f}`: share of ideal",
                      f"{med(s['share_of_ideal']):.0%} ({med(s['runs_per_s']):.1f} runs/s)",
                      f"{span(s['share_of_ideal'], '{:.0%}')}; {med(s['cpu_ms_per_step']):.2f} ms a step; "
                      f"lost {s['lost']['max']:.0f}, twice {s['answered_twice_or_more']['max']:.0f}"))
    return cells


def _long(data: dict[str, Any]) -> list[Cell]:
    by = data["cpu_ms_per_step_by_turn"]
    last = max(by, key=int)
    return [(f"worker CPU per step at turn {last} of one thread (the 500-message window is full from turn 23)",
             f"{med(by[last]):.2f} ms",
             "turn " + " · ".join(f"{k}: {med(v):.2f}" for k, v in by.items()) + " ms")]


def _slow_clients(data: dict[str, Any]) -> list[Cell]:
    a, calm = data["attacked"], data["calm"]
    return [("ack p99 at 200 events/s under 2,000 slow clients", f"{med(a['p99_ms']):.1f} ms",
             f"{span(a['p99_ms'], '{:.1f}', ' ms')}; calm p99 {med(calm['p99_ms']):.1f} ms; errors "
             f"{a['error_responses']['max']:.0f}; listen drops {a['listen_drops']['max']:.0f}")]


def _person_flood(data: dict[str, Any]) -> list[Cell]:
    return [("one person floods 300 mentions: a colleague's mention → answer, slowest of the probes",
             f"{data['colleague_mention_to_answer_max_s']:.2f} s",
             f"median {data['colleague_mention_to_answer_median_s']:.2f} s; unanswered "
             f"{data['colleague_unanswered']}; flooder in flight at most {data['flooder_in_flight_max_from_posts']}")]


def _fair_share(data: dict[str, Any]) -> list[Cell]:
    return [("one workspace floods: another workspace's mention → run start, slowest probe",
             f"{data['b_mention_to_start_max_s']:.2f} s",
             f"median {data['b_mention_to_start_median_s']:.2f} s; flooder in flight at most "
             f"{data['a_in_flight_max_from_posts']}")]


def _file_extract(data: dict[str, Any]) -> list[Cell]:
    by = {c["file"]: c for c in data["cases"]}
    pdf, docx, csv = by["50-pages.pdf"], by["500-paras.docx"], by["10mb.csv"]
    return [(f"read_file: `{pdf['file']}` read in a reader process (its start included)",
             f"{pdf['median_ms']:.0f} ms", f"worst {pdf['max_ms']:.0f} ms; peak {pdf['peak_mb']:.0f} MB; "
             f"1-page PDF {by['one-page.pdf']['median_ms']:.0f} ms; {docx['file']} {docx['median_ms']:.0f} ms"),
            (f"read_file: `{csv['file']}` decoded in a worker thread", f"{csv['median_ms']:.0f} ms",
             f"worst {csv['max_ms']:.0f} ms; peak {csv['peak_mb']:.0f} MB")]


def _child_start(data: dict[str, Any]) -> list[Cell]:
    workers, reps = data["workers"], data["reps"]
    where = f"`worker --processes {workers}`, median of {reps}"
    return [(f"supervised start: the tree's CPU until {workers} workers serve", f"{data['start_cpu_s']:.2f} s",
             f"{where}; {data['start_s']:.2f} s from the command"),
            ("a killed worker back serving (after the 0.5 s backoff): its CPU", f"{data['restart_cpu_s']:.2f} s",
             f"{where}; {data['restart_s']:.2f} s"),
            ("PSS of a supervised worker, idle", f"{data['child_pss_mb']:.0f} MB",
             f"{where}; the tree {data['tree_pss_mb']:.0f} MB")]


def _otel(data: dict[str, Any]) -> list[Cell]:
    modes = data["modes"]
    off, on = modes["off"]["cpu_ms_per_step"], modes["on, OTLP encoded"]["cpu_ms_per_step"]
    return [("tracing on (OTLP encoded, batch export): extra engine CPU per step",
             f"{med(on) - med(off):+.3f} ms",
             f"{med(on):.3f} ms on vs {med(off):.3f} ms off ({span(on, '{:.3f}', ' ms')}); spans made, dropped: "
             f"{med(modes['on, spans dropped']['cpu_ms_per_step']) - med(off):+.3f} ms")]


BENCHES = (
    Bench("ack_latency", "ack_latency", ("--reps", "1", "--seconds", "5", "--rates", "200"),
          ("--reps", "3", "--seconds", "20", "--rates", "200"), _ack),
    Bench("ack_latency_500", "ack_latency", None,
          ("--reps", "3", "--seconds", "10", "--rates", "500", "--processes", "2"), _ack),
    Bench("loop_overhead", "loop_overhead", ("--quick",), ("--reps", "3"), _loop),
    Bench("otel_overhead", "otel_overhead", ("--quick",), ("--reps", "3"), _otel),
    Bench("step_floor", "step_floor", ("--runs", "50", "--reps", "1"), ("--runs", "50", "--reps", "3"), _floor),
    Bench("first_sign", "first_sign", ("--rates", "50,200", "--seconds", "5"),
          ("--rates", "50,200", "--seconds", "10", "--reps", "3"), _first_sign),
    Bench("redis_cost", "redis_cost", ("--quick",), ("--reps", "3"), _redis),
    Bench("concurrency", "concurrency", ("--runs", "50", "--reps", "1", "--no-profile", "--no-sweep"),
          ("--runs", "50", "--reps", "3", "--no-profile", "--no-sweep"), _concurrency),
    Bench("scale_out", "scale_out", None, ("--runs", "100", "--reps", "3", "--processes", "2"), _scale_out),
    Bench("long_conversation", "long_conversation", None, ("--turns", "60", "--reps", "1"), _long),
    Bench("slack_posting", "slack_posting", ("--quick",), ("--reps", "3"), _posting),
    Bench("slack_calls", "slack_calls", (), (), _slack_calls),
    Bench("first_token", "first_token", ("--quick",), ("--reps", "5"), _first_token),
    Bench("token_lookup", "token_lookup", ("--quick",), ("--n", "5000"), _token),
    Bench("gate_cost", "gate_cost", ("--turns", "1000"), ("--turns", "2000"), _gate),
    Bench("budget_contention", "budget_contention", ("--reps", "1", "--drain-runs", "180"), ("--reps", "3"), _budget),
    Bench("mcp_overhead", "mcp_overhead", ("--calls", "100", "--reps", "1"), ("--calls", "300", "--reps", "3"), _mcp),
    Bench("leak_check", "leak_check", ("--reps", "5"), ("--reps", "20"), _leaks),
    Bench("file_extract", "file_extract", ("--quick",), ("--reps", "5"), _file_extract),
    Bench("child_start", "child_start", ("--reps", "3"), ("--reps", "5"), _child_start),
    Bench("slow_clients", "slow_clients", None, ("--seconds", "10", "--reps", "3"), _slow_clients),
    Bench("fair_share", "fair_share", None, ("--flood", "300"), _fair_share),
    Bench("person_flood", "person_flood", None, (), _person_flood),
)

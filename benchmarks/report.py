"""From raw samples to what a person reads: the machine, the tables, the targets.

Everything here works on the JSON document the run writes (``results``), not
on live objects, so the tables and the plot can be made again from a saved
run (``python -m benchmarks --from-json FILE --update-doc``) without running
anything. The tables are Markdown, which also reads well in a terminal, and
``--update-doc`` pastes them into ``docs/performance.md`` between marker
comments, so a re-run on a quiet machine refreshes the numbers and leaves the
prose alone.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.plot import Panel, Row, render_svg
from benchmarks.stats import format_ms, format_ratio, ratio, summarize

__all__ = ["LATENCY", "Target", "describe_machine", "markdown", "plot", "update_doc"]

MIB = 1024.0


@dataclass(frozen=True, slots=True)
class Target:
    """One latency measure: its key in the results, its title, and its target in ms."""

    key: str
    title: str
    median_ms: float | None
    max_ms: float | None = None
    reference: str = "timeout"


LATENCY = (
    Target("caller_death", "1. caller SIGKILLed once the command runs → SIGTERM", 1.0),
    Target("caller_death_idle", "1b. caller SIGKILLed once the supervisor idles → SIGTERM", 1.0),
    Target("overshoot", "2. deadline overshoot (SIGTERM - asked - deadline)", 3.0, 10.0),
    Target(
        "teardown", "3. teardown: command exits on SIGTERM → supervisor gone, record durable", 5.0
    ),
    Target("escalation", "4. escalation: supervisor gone - end of grace", 2.0),
    Target("spawn", "5. spawn → command running", 30.0, reference="bare"),
    Target("true", "5. `true`: whole-run wall time", None, reference="true"),
    Target("output", "10. 64 MiB through `stdout.read()`", None, reference="subprocess"),
)

#: `true` may cost this much over a bare `true` (ms).
TRUE_OVERHEAD_MS = 100.0
RSS_TARGET_MIB = 15.0
SCALE_TARGET_MS = 1000.0


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mount_of(path: Path) -> str:
    best, found = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, point, kind, *_ = line.split()
            if str(path).startswith(point) and len(point) > len(best):
                best, found = point, f"{kind} on {point}"
    except OSError:
        pass
    return found


def describe_machine(workdir: Path) -> dict[str, str]:
    """What the numbers were measured on."""
    memory = ""
    with contextlib.suppress(OSError, IndexError, ValueError):
        kib = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        memory = f"{kib / MIB / MIB:.1f} GiB"
    from tether._version import __version__

    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": _cpu_model(),
        "memory": memory,
        "kernel": platform.release(),
        "python": sys.version.split()[0] + f" ({sys.executable})",
        "timeout": _run(["timeout", "--version"]).splitlines()[0]
        if _run(["timeout", "--version"])
        else "",
        "tether": __version__,
        "records_on": _mount_of(workdir),
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


# -- tables -------------------------------------------------------------------------------


def _median(series: Mapping[str, Any]) -> float | None:
    samples = series.get("samples_ms") or []
    return summarize(samples).median if samples else None


def _never_text(never: Mapping[str, Any]) -> str:
    return (
        f"never (∞): {never['alive']:.0f} of {never['trials']:.0f} commands still running "
        f"{never['after_s']:g} s after the caller's death"
    )


def _latency_rows(target: Target, results: Mapping[str, Any]) -> list[str]:
    measure = results["latency"].get(target.key) or {}
    reference = _median(measure.get(target.reference, {}))
    bare = _median(measure.get("true", {})) if target.key == "true" else None
    rows = []
    for contender, series in measure.items():
        samples = series["samples_ms"]
        never = series.get("never")
        if never and not samples:
            rows.append(
                f"| {target.title} | {contender} | {never['trials']:.0f} | {_never_text(never)} "
                f"| | | | {_target_text(target)} | |"
            )
            continue
        if not samples:
            rows.append(f"| {target.title} | {contender} | 0 | no samples | | | | | |")
            continue
        summary = summarize(samples)
        shown = format_ratio(ratio(summary.median, reference)) if reference is not None else "—"
        overhead = "" if bare is None else f" (+{format_ms(summary.median - bare)})"
        met = _met(target, contender, summary.median, summary.maximum, bare)
        failures = f" ({len(series['failures'])} failed)" if series["failures"] else ""
        rows.append(
            f"| {target.title} | {contender}{failures} | {summary.n} "
            f"| {format_ms(summary.median)}{overhead} | {format_ms(summary.p90)} "
            f"| {format_ms(summary.maximum)} | {shown} | {_target_text(target)} | {met} |"
        )
    return rows


def _target_text(target: Target) -> str:
    if target.key == "true":
        return f"≤ +{TRUE_OVERHEAD_MS:g} over `true`"
    text = f"≤ {target.median_ms:g}" if target.median_ms is not None else "—"
    if target.max_ms is not None:
        text += f", max ≤ {target.max_ms:g}"
    return text


def _met(target: Target, contender: str, median: float, maximum: float, bare: float | None) -> str:
    if not contender.startswith(("tether", "seed")):
        return ""
    if target.key == "true":
        ok = bare is not None and median - bare <= TRUE_OVERHEAD_MS
    else:
        ok = target.median_ms is None or median <= target.median_ms
        if target.max_ms is not None:
            ok = ok and maximum <= target.max_ms
    return "**yes**" if ok else "**no**"


def _idle_rows(results: Mapping[str, Any]) -> list[str]:
    rows = []
    for item in results.get("idle", []):
        delta, memory = item["delta"], item["memory_kib"]
        cpu_ms = delta["cpu_ns"] / 1e6
        tether = item["role"].startswith(("tether", "seed")) and "caller" not in item["role"]
        idle_ok = delta["voluntary_ctxt_switches"] == 0 and delta["cpu_ticks"] == 0
        rss_ok = memory.get("VmHWM", 0) / MIB <= RSS_TARGET_MIB
        rows.append(
            f"| {item['role']} | {item['window_s']:g} s | {cpu_ms:.3f} | {delta['cpu_ticks']} "
            f"| {delta['voluntary_ctxt_switches']} | {delta['nonvoluntary_ctxt_switches']} "
            f"| {('**yes**' if idle_ok else '**no**') if tether else ''} "
            f"| {memory.get('VmHWM', 0) / MIB:.1f} | {memory.get('VmRSS', 0) / MIB:.1f} "
            f"| {memory.get('Pss', 0) / MIB:.1f} | {memory.get('Pss_Anon', 0) / MIB:.1f} "
            f"| {('**yes**' if rss_ok else '**no**') if tether else ''} |"
        )
    return rows


def _api_section(results: Mapping[str, Any]) -> list[str]:
    """Measure 9: one caller, N launches through ``tether.launch``, with and without a zygote."""
    items = results.get("api", [])
    if not items:
        return []
    lines = [
        "",
        "**The API** (9: one long-lived caller launching N commands through `tether.launch`, "
        "one after the other, after one cold launch; then the caller SIGKILLed; times in ms, "
        "memory in MiB, PSS measured with all N running)",
        "",
        "| zygote | N | cold launch | launch median | p90 | max | all N running "
        "| supervisors' PSS | per supervisor | zygote PSS | all gone after the kill | records |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for item in items:
        size = item["launches"]
        if "error" in item:
            lines.append(f"| {'yes' if item['zygote'] else 'no'} | {size} | {item['error']} |")
            continue
        lines.append(
            f"| {'yes' if item['zygote'] else 'no (`TETHER_ZYGOTE=0`)'} | {size} "
            f"| {format_ms(item.get('cold_launch_ms'))} "
            f"| {format_ms(item.get('launch_median_ms'))} "
            f"| {format_ms(item.get('launch_p90_ms'))} "
            f"| {format_ms(item.get('launch_max_ms'))} "
            f"| {format_ms(item.get('all_launched_ms'))} "
            f"| {item.get('supervisors_pss_kib', 0) / MIB:.1f} "
            f"| {item.get('supervisor_pss_median_kib', 0) / MIB:.2f} "
            f"| {item.get('zygote_pss_kib', 0) / MIB:.1f} "
            f"| {format_ms(item.get('everything_gone_ms'))} "
            f"| {item.get('records', 0)} of {size + 1} "
            f"({item.get('records_parent_lost', 0)} parent_lost) |"
        )
    return lines


def _loops_section(results: Mapping[str, Any]) -> list[str]:
    """Measures 11 and 12: a loop of short runs, whole-loop wall time, each contender."""
    items = results.get("loops", [])
    if not items:
        return []
    lines = [
        "",
        "**Loops** (10: a shell loop of N `timeout 5 true`; 11: one Python program calling "
        '`run(["true"])` N times; wall time of the whole loop, median of the trials, seconds)',
        "",
        "| loop | contender | N | median (s) | per call (ms) | trials | failures |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for item in items:
        seconds = item.get("seconds", [])
        median = sorted(seconds)[len(seconds) // 2] if seconds else None
        per_call = "n/a" if median is None else f"{1000 * median / item['n']:.1f}"
        shown = "n/a" if median is None else f"{median:.3f}"
        loop = "shell" if item.get("measure") == "shell" else "API"
        lines.append(
            f"| {loop} | {item['contender']} | {item['n']} | {shown} | {per_call} "
            f"| {len(seconds)} | {len(item.get('failures', []))} |"
        )
    return lines


def evaluation_section(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Measure 13: medians over the rounds, per way and width, with the ratios to subprocess."""
    if not items:
        return []
    first = items[0]
    lines = [
        "",
        f"**Evaluation workload** (13: {first['size']} ordinary `python -c` programs plus the "
        f"8 hostile ones ({first['big']} MiB allocation, {first['out']} MiB of output), "
        '3 s timeout, `capture_output`; tether with `grace=1`, `memory_max="512M"`, '
        "`pids_max=64`, `record=False`; median of "
        f"{max(int(i['round']) for i in items)} interleaved rounds; CPU = the whole tree's, "
        "s; ratio to `subprocess.run` at the same width)",
        "",
        "| way | at a time | wall (s) | ratio | CPU (s) | ratio | left behind | outcomes |",
        "|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for item in items:
        groups.setdefault((item["way"], item["workers"]), []).append(item)

    def median(way: str, width: int, key: str) -> float | None:
        values = sorted(i[key] for i in groups.get((way, width), []) if key in i)
        return values[len(values) // 2] if values else None

    for (way, width), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = []
        for key in ("wall_s", "cpu_s"):
            mine, base = median(way, width, key), median("subprocess.run", width, key)
            cells.append("n/a" if mine is None else f"{mine:.2f}")
            cells.append("n/a" if mine is None or not base else f"{mine / base:.2f}")
        left = sorted(int(i.get("left_behind", -1)) for i in runs)
        outcomes = runs[-1].get("outcomes") or {"failure": runs[-1].get("failure")}
        told = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        lines.append(
            f"| `{way}` | {width} | {' | '.join(cells)} "
            f"| {'-'.join(str(x) for x in sorted(set(left)))} | {told} |"
        )
    return lines


def _scale_rows(results: Mapping[str, Any]) -> list[str]:
    rows = []
    for item in results.get("scale", []):
        memory = item.get("supervisor_memory_kib", {})
        mem = f"{memory.get('Pss', 0) / MIB:.0f} | {memory.get('VmRSS', 0) / MIB:.0f}"
        if "never" in item:
            never = item["never"]
            rows.append(
                f"| {item['door']} | {item['tethers']} | {item.get('callers', '')} "
                f"| {_all_running(item)} | never (∞): "
                f"{never['alive']} of {item['tethers']} commands still running "
                f"{never['after_s']:g} s later | | | | — | {mem} | |"
            )
            continue
        last = item.get("last_command_gone_ms")
        ok = (
            last is not None
            and last <= SCALE_TARGET_MS
            and item.get("records") == item["tethers"]
            and item.get("commands_gone") == item["tethers"]
        )
        rows.append(
            f"| {item['door']} | {item['tethers']} | {item.get('callers', '')} "
            f"| {_all_running(item)} | {format_ms(item.get('last_caller_gone_ms'))} "
            f"| {format_ms(last)} | {format_ms(item.get('median_command_gone_ms'))} "
            f"| {format_ms(item.get('last_supervisor_gone_ms'))} "
            f"| {item.get('records', 0)} of {item['tethers']} "
            f"({item.get('records_parent_lost', 0)} parent_lost) "
            f"| {mem} | {'**yes**' if ok else '**no**'} |"
        )
    return rows


def _all_running(item: Mapping[str, Any]) -> str:
    """How long the tethers took to all run, and whether they were launched at once."""
    if "all_running_ms" not in item:
        return "—"  # a run from before this column
    how = "at once" if item.get("launched_at_once") else "8 at a time"
    return f"{format_ms(item['all_running_ms'])} ({how})"


def _median_of(results: Mapping[str, Any], key: str, contender: str) -> float | None:
    series = (results["latency"].get(key) or {}).get(contender)
    return _median(series) if series else None


def _glance_latency(results: Mapping[str, Any], target: Target) -> str:
    cells, verdicts = [], []
    for door in ("tether run", "seed door"):
        series = (results["latency"].get(target.key) or {}).get(door)
        if not series or not series["samples_ms"]:
            cells.append("—")
            continue
        summary = summarize(series["samples_ms"])
        cells.append(format_ms(summary.median))
        verdicts.append(_met(target, door, summary.median, summary.maximum, None))
    return (
        f"| {target.title} | {_target_text(target)} | {' | '.join(cells)} | {', '.join(verdicts)} |"
    )


def _glance_true(results: Mapping[str, Any]) -> str:
    bare = _median_of(results, "true", "true")
    cells, verdicts = [], []
    for variant in ("tether run -- true", "seed door -- true"):
        median = _median_of(results, "true", variant)
        if median is None or bare is None:
            cells.append("—")
            continue
        cells.append(f"+{format_ms(median - bare)}")
        verdicts.append("**yes**" if median - bare <= TRUE_OVERHEAD_MS else "**no**")
    return (
        f"| 5. `true`: overhead over a bare `true` | ≤ +{TRUE_OVERHEAD_MS:g} "
        f"| {' | '.join(cells)} | {', '.join(verdicts)} |"
    )


def _glance_idle(results: Mapping[str, Any]) -> list[str]:
    by_role = {item["role"]: item for item in results.get("idle", [])}
    idle_cells, memory_cells, idle_ok, memory_ok = [], [], [], []
    for door in ("tether run", "seed door"):
        item = by_role.get(f"{door}: supervisor")
        if item is None:
            idle_cells.append("—")
            memory_cells.append("—")
            continue
        delta, peak = item["delta"], item["memory_kib"].get("VmHWM", 0) / MIB
        idle_cells.append(
            f"{delta['cpu_ticks']} ticks, {delta['voluntary_ctxt_switches']} wake-ups"
        )
        memory_cells.append(f"{peak:.1f} MiB")
        idle_ok.append(delta["cpu_ticks"] == 0 and delta["voluntary_ctxt_switches"] == 0)
        memory_ok.append(peak <= RSS_TARGET_MIB)
    if not idle_cells or all(cell == "—" for cell in idle_cells):
        return []
    return [
        f"| 6. idle while watching | 0 CPU, 0 wake-ups | {' | '.join(idle_cells)} "
        f"| {_yes(idle_ok)} |",
        f"| 7. peak RSS of a supervisor | ≤ {RSS_TARGET_MIB:g} MiB | {' | '.join(memory_cells)} "
        f"| {_yes(memory_ok)} |",
    ]


def _yes(flags: list[bool]) -> str:
    return ", ".join("**yes**" if flag else "**no**" for flag in flags)


def _glance_scale(results: Mapping[str, Any]) -> str | None:
    items = [item for item in results.get("scale", []) if "never" not in item]
    if not items:
        return None
    size = max(item["tethers"] for item in items)
    cells, verdicts = [], []
    for door in ("tether run", "seed door"):
        item = next((i for i in items if i["door"] == door and i["tethers"] == size), None)
        if item is None:
            cells.append("—")
            continue
        last = item.get("last_command_gone_ms")
        complete = item.get("records") == size and item.get("commands_gone") == size
        cells.append(f"{format_ms(last)}, {item.get('records', 0)} records")
        verdicts.append(last is not None and last <= SCALE_TARGET_MS and complete)
    return (
        f"| 8. {size} callers SIGKILLed: last command gone | ≤ {SCALE_TARGET_MS:g}, "
        f"all records | {' | '.join(cells)} | {_yes(verdicts)} |"
    )


def glance(results: Mapping[str, Any]) -> list[str]:
    """One row per target of issue 6: the two tether doors' medians and whether they meet it."""
    rows = [
        "| target (medians, ms) | target | `tether run` | seed door | met |",
        "|---|---|--:|--:|---|",
    ]
    for target in LATENCY:
        if target.key == "true":
            rows.append(_glance_true(results))
        elif target.key in results["latency"]:
            rows.append(_glance_latency(results, target))
    rows += _glance_idle(results)
    scale_row = _glance_scale(results)
    if scale_row:
        rows.append(scale_row)
    return rows


def markdown(results: Mapping[str, Any]) -> str:
    """The results as Markdown tables, with the run's conditions."""
    meta = results["meta"]
    lines = [
        f"Run: {meta['mode']} mode, {meta['date']}, {meta['duration_s']:.0f} s; "
        f"load average {meta['machine']['load_average_at_start']} at the start, "
        f"{meta.get('load_average_at_end', '?')} at the end.",
        "",
        "**At a glance**",
        "",
        *glance(results),
        "",
        "**Latencies** (milliseconds; ratio = median over the reference's median: "
        "`timeout`, a bare command for spawn, a bare `true` for `true`)",
        "",
        "| measure | contender | n | median | p90 | max | ratio | target | met |",
        "|---|---|--:|--:|--:|--:|--:|---|---|",
    ]
    for target in LATENCY:
        lines += _latency_rows(target, results)
    lines += [
        "",
        "**Idle and memory** (6 and 7: one idle window, all contenders side by side; CPU from "
        "`/proc/PID/schedstat` and in ticks of utime+stime; switches from `/proc/PID/status`; "
        "memory in MiB: peak RSS = VmHWM, PSS from `smaps_rollup`)",
        "",
        "| process | window | CPU ms | CPU ticks | voluntary switches | involuntary | idle met "
        "| peak RSS | RSS | PSS | PSS anon | ≤ 15 MiB |",
        "|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|---|",
        *_idle_rows(results),
        "",
        "**Scale** (8: the tethers launched, all at once up to 100, else 8 in flight; "
        "all running = ms from the first launch until every command had said it runs; "
        "then every caller SIGKILLed by one `killpg`; times in ms from the kill "
        "(a caller is gone when its pidfd is readable, after the kernel tore it down); "
        "memory = sum over the supervisors, MiB, measured before the kill)",
        "",
        "| contender | tethers | callers | all running | last caller gone | last command gone "
        "| median command gone "
        "| last supervisor gone | records | supervisors' PSS | supervisors' RSS "
        "| ≤ 1 s, all records |",
        "|---|--:|---|--:|--:|--:|--:|--:|---|--:|--:|---|",
        *_scale_rows(results),
        *_api_section(results),
        *_loops_section(results),
        *evaluation_section(results.get("evaluation", [])),
    ]
    failures = [
        f"- {key} / {contender}: {', '.join(series['failures'][:5])}"
        for key, measure in results["latency"].items()
        for contender, series in measure.items()
        if series["failures"]
    ]
    if failures:
        lines += ["", "Failed trials:", *failures]
    return "\n".join(lines) + "\n"


def machine_markdown(results: Mapping[str, Any]) -> str:
    """The machine the run was measured on, as a short list."""
    machine = results["meta"]["machine"]
    return (
        "\n".join(
            [
                f"- CPU: {machine['cpus']} x {machine['cpu_model']}; memory {machine['memory']}",
                f"- kernel {machine['kernel']}; Python {machine['python']}",
                f"- {machine['timeout']}; tether {machine['tether']}",
                f"- records written to {machine['records_on']}",
            ]
        )
        + "\n"
    )


# -- plot and doc ---------------------------------------------------------------------------


def plot(results: Mapping[str, Any]) -> str:
    """The latency distributions as one SVG figure."""
    panels = []
    for target in LATENCY:
        measure = results["latency"].get(target.key) or {}
        rows = []
        for contender, series in measure.items():
            never = series.get("never")
            text = _never_text(never) if never and not series["samples_ms"] else None
            rows.append(Row(contender, series["samples_ms"], text))
        limit = target.median_ms
        if target.key == "true" and "true" in measure and measure["true"]["samples_ms"]:
            limit = summarize(measure["true"]["samples_ms"]).median + TRUE_OVERHEAD_MS
        panels.append(Panel(target.title, rows, limit))
    meta = results["meta"]
    machine = meta["machine"]
    notes = {
        "machine": f"{machine['cpus']} x {machine['cpu_model']}, Linux {machine['kernel']}, "
        f"Python {machine['python'].split()[0]}",
        "run": f"{meta['mode']} mode, {meta['date']}",
    }
    return render_svg("tether vs GNU timeout: latency distributions", panels, notes)


def _replace_between(text: str, name: str, content: str) -> str:
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"docs/performance.md has no {begin} ... {end} markers")
    replacement = f"{begin}\n{content}{end}"
    return pattern.sub(lambda _match: replacement, text)


def update_doc(doc: Path, results: Mapping[str, Any], write: Callable[[Path, str], None]) -> None:
    """Put the machine description and the tables between their markers in ``doc``."""
    text = doc.read_text()
    text = _replace_between(text, "machine", machine_markdown(results))
    text = _replace_between(text, "results", markdown(results))
    write(doc, text)

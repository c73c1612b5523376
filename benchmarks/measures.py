"""The eight measures of issue 6, each as trials interleaved across the contenders.

Every latency is a difference of two ``CLOCK_MONOTONIC`` readings: one taken
by the benchmark (just before it kills a caller or spawns a contender, or when
a pidfd wakes it up), the other by the command itself (when SIGTERM reaches
it, or when it starts). Trials of one measure run one at a time, and the
contenders take turns trial by trial (A, B, C, then B, C, A, ...), so that a
busy spell on the machine is shared rather than landing on one contender.

Where ``timeout`` cannot do what is measured (it does not notice its caller's
death), its trials still run: the caller is killed, and after a bound the
command is checked for life. Those trials are reported as "never" with the
count of commands still running, rather than left out.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.doors import Doors, Started
from benchmarks.procs import (
    Channel,
    Message,
    Registry,
    Waiter,
    cpu_ns,
    cpu_ticks,
    exited,
    memory_kib,
    prompt,
    settle,
    status_fields,
)

__all__ = [
    "Bench",
    "Series",
    "caller_death",
    "deadline_and_teardown",
    "escalation",
    "idle_and_memory",
    "scale",
    "spawn_to_running",
    "true_wall",
]

TETHER_DOORS = ("tether run", "seed door")
DOORS = (*TETHER_DOORS, "timeout")
#: Measure 1's floor: a process blocked reading a pipe whose only writer is SIGKILLed.
FLOOR = "floor: reader sees EOF"

#: Upper bound of any one wait for something that should happen (a bound, not an expectation).
BOUND = 30.0


@dataclass
class Series:
    """The samples of one measure for one contender, in milliseconds."""

    samples: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: For a contender that cannot do it: trials, commands still alive, after how long.
    never: dict[str, float] | None = None
    extra: dict[str, list[float]] = field(default_factory=dict)

    def add_extra(self, name: str, value: float) -> None:
        self.extra.setdefault(name, []).append(value)

    def as_json(self) -> dict[str, object]:
        return {
            "samples_ms": [round(s, 4) for s in self.samples],
            "failures": self.failures,
            "never": self.never,
            "extra_ms": {k: [round(v, 4) for v in vs] for k, vs in self.extra.items()},
        }


@dataclass
class Bench:
    """What every measure needs: processes, the FIFO, the contenders, randomness, a voice."""

    registry: Registry
    channel: Channel
    doors: Doors
    rng: random.Random
    say: Callable[[str], None]
    #: Other copies of tether to hold side by side with this one: name -> PYTHONPATH.
    alternatives: dict[str, str] = field(default_factory=dict)

    def contenders(self, base: tuple[str, ...] = DOORS) -> tuple[str, ...]:
        """``base``, plus each tether contender again for every alternative copy of tether."""
        extra = [
            f"{door} [{name}]"
            for name in self.alternatives
            for door in base
            if door.startswith(("tether", "seed"))
        ]
        return (*base, *extra)

    def env(self, contender: str) -> dict[str, str] | None:
        """The environment that runs ``contender``'s copy of tether (``None``: this one)."""
        if not contender.endswith("]"):
            return None
        name = contender[contender.rindex("[") + 1 : -1]
        path = self.alternatives[name]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (path, os.environ.get("PYTHONPATH")))),
        }


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _door(contender: str) -> str:
    """The door a contender uses, without the name of its copy of tether."""
    return contender.split(" [", 1)[0]


def _rotate(items: tuple[str, ...], turn: int) -> list[str]:
    shift = turn % len(items)
    return list(items[shift:] + items[:shift])


def _ready(bench: Bench, waiter: Waiter, token: str) -> Message | None:
    waiter.until(lambda: bench.channel.find("ready", token) is not None, BOUND)
    return bench.channel.find("ready", token)


def _record(path: Path | None) -> dict[str, object] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _signal_at(record: dict[str, object], name: str) -> float | None:
    signals = record.get("signals")
    if not isinstance(signals, list):
        return None
    for sent in signals:
        if isinstance(sent, dict) and sent.get("signal") == name:
            at = sent.get("at_seconds")
            return float(at) if isinstance(at, int | float) else None
    return None


def _last_words(record: Path | None) -> str:
    """The last line of the run's event log, to say why a record is missing."""
    if record is None:
        return "no record asked for"
    try:
        lines = record.with_name(record.stem + ".events.jsonl").read_text().splitlines()
    except OSError as error:
        return f"no event log either ({error.strerror})"
    return f"event log ends: {lines[-1][:300]}" if lines else "empty event log"


def _check_record(series: Series, started: Started, reason: str) -> dict[str, object] | None:
    if started.door == "timeout":
        return None
    record = _record(started.record)
    if record is None:
        status = started.popen.poll()
        series.failures.append(
            f"{started.token}: no record (exit status {status}); {_last_words(started.record)}"
        )
    elif record.get("reason") != reason:
        series.failures.append(f"{started.token}: reason {record.get('reason')!r}")
    return record


def _finish_trial(
    bench: Bench, series: Series, started: Started | None, token: str, *, leftovers: bool = False
) -> None:
    """Kill what the trial left; a leftover is a failure unless ``leftovers`` were expected."""
    if started is not None:
        started.close_lifeline()
    killed = bench.registry.cleanup()
    if killed and not leftovers:
        series.failures.append(f"{token}: killed leftovers {killed}")
    bench.channel.forget({token})


# -- 1. caller SIGKILLed -> command gets SIGTERM ----------------------------------

#: When measure 1 kills the caller: as a user does, once the command runs (``at once``), or
#: once the supervisor has gone idle (``idle``: its CPU time stopped moving for 0.1 s).
MOMENTS = ("at once", "idle")


def caller_death(
    bench: Bench, trials: int, never_trials: int, never_after: float, moment: str = "at once"
) -> dict[str, Series]:
    """SIGKILL the caller's process group at ``moment``; time the command's SIGTERM.

    The caller is a ``/bin/sh`` that runs what holds the lifeline as its child
    (``tether run`` itself; the seed door's holder), in a process group of its
    own, as a user's shell runs a job; the benchmark kills that group.
    """
    contenders = (*bench.contenders(), FLOOR)
    series = {door: Series() for door in contenders}
    series["timeout"].never = {"trials": 0, "alive": 0, "after_s": never_after}
    for turn in range(trials):
        for door in _rotate(contenders, turn):
            if door == "timeout" and turn >= never_trials:
                continue
            _caller_death_trial(bench, door, series[door], never_after, moment)
    return series


def _start_with_caller(bench: Bench, door: str, token: str) -> tuple[Started | None, int]:
    """Start ``door``'s command in ``exit`` mode; return it and its caller's process group."""
    doors, env = bench.doors, bench.env(door)
    command = doors.command("exit", token)
    if _door(door) == "tether run":
        started = doors.tether_run(command, token, env=env, process_group=0, shell=True)
        return started, started.popen.pid
    if door == "timeout":
        return None, doors.timeout_under_shell([command], process_group=0)
    read_end, write_end = os.pipe()
    caller = doors.holder((write_end,), process_group=0, shell=True)
    if door == FLOOR:
        doors.eof_reader(token, read_end)
        return None, caller
    return doors.seed(command, token, read_end=read_end, env=env), caller


def _caller_death_trial(
    bench: Bench, door: str, series: Series, never_after: float, moment: str
) -> None:
    token = bench.doors.token()
    started: Started | None = None
    waiter = Waiter(bench.channel)
    try:
        started, caller = _start_with_caller(bench, door, token)
        ready = _ready(bench, waiter, token)
        if ready is None:
            series.failures.append(f"{token}: command never announced itself")
            return
        bench.registry.track(ready.pid)
        # The floor's reader is the benchmark's child: it has no supervisor but itself.
        watched = ready.pid if door == FLOOR else ready.ppid
        if moment == "idle":
            settle([watched], quiet=0.1, bound=BOUND)
        waiter.watch("supervisor", bench.registry.track(watched))
        waiter.watch("caller", bench.registry.pidfd(caller))
        asked = time.monotonic()
        os.killpg(caller, signal.SIGKILL)
        if door == "timeout":
            waiter.until(lambda: bench.channel.find("term", token) is not None, never_after)
            _count_never(bench, series, bench.channel.find("term", token), ready.pid, asked)
            return
        everything = ("supervisor", "caller")
        waiter.until(
            lambda: (
                bench.channel.find("term", token) is not None
                and all(name in waiter.gone for name in everything)
            ),
            BOUND,
        )
        term = bench.channel.find("term", token)
        if term is None:
            series.failures.append(f"{token}: no SIGTERM reached the command")
            return
        series.samples.append(_ms(term.stamp - asked))
        series.add_extra("killed_after_ready", _ms(asked - ready.stamp))
        if "supervisor" in waiter.gone:
            series.add_extra("supervisor_gone_after_kill", _ms(waiter.gone["supervisor"] - asked))
        if started is not None:
            started.popen.wait(BOUND)
            record = _check_record(series, started, "parent_lost")
            heard = _lifeline_closed_at(started.record) if record is not None else None
            if heard is not None:
                series.add_extra("lifeline_end_heard_after_kill", _ms(heard - asked))
    finally:
        waiter.close()
        _finish_trial(bench, series, started, token, leftovers=door == "timeout")


def _lifeline_closed_at(record: Path | None) -> float | None:
    """The supervisor's monotonic stamp of the lifeline's end of file, from its event log."""
    if record is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in record.with_name(record.stem + ".events.jsonl").read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "lifeline_closed" and isinstance(event.get("mono"), float):
                return float(event["mono"])
    return None


def _count_never(
    bench: Bench, series: Series, term: Message | None, command: int, asked: float
) -> None:
    never = series.never
    assert never is not None
    never["trials"] += 1
    pidfd = bench.registry.pidfd(command)
    if term is None and pidfd is not None and not exited(pidfd):
        never["alive"] += 1
    elif term is not None:
        series.samples.append(_ms(term.stamp - asked))


# -- 2 and 3. deadline overshoot, then teardown ------------------------------------


def deadline_and_teardown(bench: Bench, trials: int) -> tuple[dict[str, Series], dict[str, Series]]:
    """Deadlines drawn in 0.5..0.6 s: SIGTERM's lateness, then how long the supervisor lingers."""
    contenders = bench.contenders()
    overshoot = {door: Series() for door in contenders}
    teardown = {door: Series() for door in contenders}
    for turn in range(trials):
        for door in _rotate(contenders, turn):
            _deadline_trial(bench, door, overshoot[door], teardown[door])
    return overshoot, teardown


def _start(
    bench: Bench, door: str, command: list[str], token: str, *, deadline: float, grace: float
) -> Started:
    env = bench.env(door)
    if _door(door) == "tether run":
        started = bench.doors.tether_run(command, token, deadline=deadline, grace=grace, env=env)
    elif _door(door) == "seed door":
        started = bench.doors.seed(command, token, deadline=deadline, grace=grace, env=env)
    else:
        return bench.doors.gnu_timeout(command, token, deadline=deadline, grace=grace)
    started.door = door
    return started


def _deadline_trial(bench: Bench, door: str, overshoot: Series, teardown: Series) -> None:
    token = bench.doors.token()
    command = bench.doors.command("exit", token)
    deadline = bench.rng.uniform(0.5, 0.6)
    waiter = Waiter(bench.channel)
    started: Started | None = None
    try:
        asked = time.monotonic()
        started = _start(bench, door, command, token, deadline=deadline, grace=5.0)
        ready = _ready(bench, waiter, token)
        if ready is None:
            overshoot.failures.append(f"{token}: command never announced itself")
            return
        bench.registry.track(ready.pid)
        waiter.watch("supervisor", bench.registry.track(ready.ppid))
        waiter.until(
            lambda: bench.channel.find("term", token) is not None and "supervisor" in waiter.gone,
            deadline + BOUND,
        )
        term = bench.channel.find("term", token)
        if term is None or "supervisor" not in waiter.gone:
            overshoot.failures.append(f"{token}: no SIGTERM, or the supervisor stayed")
            return
        overshoot.samples.append(_ms(term.stamp - (asked + deadline)))
        teardown.samples.append(_ms(waiter.gone["supervisor"] - term.stamp))
        started.popen.wait(BOUND)
        record = _check_record(teardown, started, "deadline_exceeded")
        if record is not None:
            sent = _signal_at(record, "SIGTERM")
            if sent is not None:
                overshoot.add_extra("sent_after_deadline_by_own_clock", _ms(sent - deadline))
    finally:
        waiter.close()
        _finish_trial(bench, teardown, started, token)


# -- 4. escalation past the grace ----------------------------------------------------


def escalation(bench: Bench, trials: int, grace: float) -> dict[str, Series]:
    """The command ignores SIGTERM: supervisor gone, minus (SIGTERM's arrival + grace)."""
    contenders = bench.contenders()
    series = {door: Series() for door in contenders}
    for turn in range(trials):
        for door in _rotate(contenders, turn):
            _escalation_trial(bench, door, series[door], grace)
    return series


def _escalation_trial(bench: Bench, door: str, series: Series, grace: float) -> None:
    token = bench.doors.token()
    command = bench.doors.command("ignore", token)
    deadline = bench.rng.uniform(0.5, 0.6)
    waiter = Waiter(bench.channel)
    started: Started | None = None
    try:
        started = _start(bench, door, command, token, deadline=deadline, grace=grace)
        ready = _ready(bench, waiter, token)
        if ready is None:
            series.failures.append(f"{token}: command never announced itself")
            return
        waiter.watch("command", bench.registry.track(ready.pid))
        waiter.watch("supervisor", bench.registry.track(ready.ppid))
        waiter.until(
            lambda: "supervisor" in waiter.gone and "command" in waiter.gone,
            deadline + grace + BOUND,
        )
        term = bench.channel.find("term", token)
        if term is None or "supervisor" not in waiter.gone:
            series.failures.append(f"{token}: no SIGTERM, or the supervisor stayed")
            return
        end_of_grace = term.stamp + grace
        series.samples.append(_ms(waiter.gone["supervisor"] - end_of_grace))
        series.add_extra("command_killed_past_grace", _ms(waiter.gone["command"] - end_of_grace))
        started.popen.wait(BOUND)
        record = _check_record(series, started, "deadline_exceeded")
        if record is not None:
            term_at, kill_at = _signal_at(record, "SIGTERM"), _signal_at(record, "SIGKILL")
            if term_at is not None and kill_at is not None:
                series.add_extra("kill_past_grace_by_own_clock", _ms(kill_at - term_at - grace))
    finally:
        waiter.close()
        _finish_trial(bench, series, started, token)


# -- 5. `true` and spawn -> running -------------------------------------------------------

TRUE_VARIANTS = (
    "true",
    "timeout 10 true",
    "tether run -- true",
    "tether run --no-record -- true",
    "seed door -- true",
)


def true_wall(bench: Bench, trials: int) -> dict[str, Series]:
    """Whole-run wall time of ``true`` bare and under each contender, as a shell sees it."""
    variants = bench.contenders(TRUE_VARIANTS)
    series = {variant: Series() for variant in variants}
    for turn in range(trials):
        for variant in _rotate(variants, turn):
            _true_trial(bench, variant, series[variant])
    return series


def _true_trial(bench: Bench, variant: str, series: Series) -> None:
    doors, token = bench.doors, bench.doors.token()
    started: Started | None = None
    waiter = Waiter(bench.channel)
    try:
        asked = time.monotonic()
        if variant == "true":
            popen = bench.registry.start([doors.true])
        elif variant.startswith("timeout"):
            started = doors.gnu_timeout([doors.true], token, deadline=10.0, grace=None)
        elif variant.startswith("seed"):
            started = doors.seed([doors.true], token, env=bench.env(variant))
        else:
            record = "--no-record" not in variant
            started = doors.tether_run([doors.true], token, record=record, env=bench.env(variant))
        popen = started.popen if started else popen
        # Woken by the pidfd: Popen.wait(timeout) polls with sleeps of up to
        # 50 ms, which would round every sample up to its schedule.
        waiter.watch("exited", bench.registry.pidfd(popen.pid))
        waiter.until(lambda: "exited" in waiter.gone, BOUND)
        series.samples.append(_ms(waiter.gone["exited"] - asked))
        status = popen.wait(BOUND)
        if status != 0:
            series.failures.append(f"{token}: exit status {status}")
        if started is not None and started.record is not None:
            _check_record(series, started, "completed")
    finally:
        waiter.close()
        _finish_trial(bench, series, started, token)


SPAWN_VARIANTS = ("bare", "timeout", "tether run", "seed door")


def spawn_to_running(bench: Bench, trials: int) -> dict[str, Series]:
    """From the caller's stamp before spawning to the command's first instruction."""
    variants = bench.contenders(SPAWN_VARIANTS)
    series = {variant: Series() for variant in variants}
    for turn in range(trials):
        for variant in _rotate(variants, turn):
            _spawn_trial(bench, variant, series[variant])
    return series


def _spawn_trial(bench: Bench, variant: str, series: Series) -> None:
    token = bench.doors.token()
    command = bench.doors.command("start", token)
    waiter = Waiter(bench.channel)
    started: Started | None = None
    try:
        asked = time.monotonic()
        if variant == "bare":
            popen = bench.registry.start(command)
        else:
            started = _start(
                bench,
                variant,
                command,
                token,
                deadline=0.0 if variant != "timeout" else 3600.0,
                grace=5.0,
            )
            popen = started.popen
        ready = _ready(bench, waiter, token)
        if ready is None:
            series.failures.append(f"{token}: command never announced itself")
            return
        series.samples.append(_ms(ready.stamp - asked))
        popen.wait(BOUND)
    finally:
        waiter.close()
        _finish_trial(bench, series, started, token)


# -- 6 and 7. idle and memory ----------------------------------------------------------------


@dataclass
class Watched:
    """One process watched through an idle window."""

    role: str
    pid: int
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)


def _snapshot(pid: int) -> dict[str, int]:
    status = status_fields(pid)
    return {
        "cpu_ticks": cpu_ticks(pid) or 0,
        "cpu_ns": cpu_ns(pid) or 0,
        "voluntary_ctxt_switches": status.get("voluntary_ctxt_switches", 0),
        "nonvoluntary_ctxt_switches": status.get("nonvoluntary_ctxt_switches", 0),
    }


def idle_and_memory(bench: Bench, window: float) -> list[dict[str, object]]:
    """All contenders watch a sleeping command through the same window; then their memory."""
    doors = bench.doors
    waiter = Waiter(bench.channel)
    started: list[Started] = []
    watched: list[Watched] = []
    tokens: set[str] = set()
    try:
        for door in bench.contenders():
            token = doors.token()
            tokens.add(token)
            started.append(
                _start(
                    bench,
                    door,
                    doors.command("exit", token),
                    token,
                    deadline=0.0 if door != "timeout" else 3600.0,
                    grace=5.0,
                )
            )
        reference = bench.registry.start(
            [sys.executable, "-c", "import signal\nwhile True: signal.pause()"]
        )
        for run in started:
            ready = _ready(bench, waiter, run.token)
            if ready is None:
                raise RuntimeError(f"{run.door}: the command never announced itself")
            bench.registry.track(ready.pid)
            bench.registry.track(ready.ppid)
            role = "timeout" if run.door == "timeout" else f"{run.door}: supervisor"
            watched.append(Watched(role, ready.ppid))
            if run.door.startswith("tether run"):
                watched.append(Watched(f"{run.door}: caller (waiting)", run.popen.pid))
        watched.append(Watched("python -c 'signal.pause()' (reference)", reference.pid))
        settle([w.pid for w in watched], quiet=0.5, bound=BOUND)
        for w in watched:
            w.before = _snapshot(w.pid)
        bench.say(f"  idle window {window:g}s")
        time.sleep(window)
        for w in watched:
            w.after = _snapshot(w.pid)
            w.memory = memory_kib(w.pid)
        stopping = [w for w in watched if "reference" not in w.role]
        for w in stopping:
            waiter.watch(w.role, bench.registry.pidfd(w.pid))
        for run in started:
            _stop_politely(run)
        waiter.until(lambda: all(w.role in waiter.gone for w in stopping), BOUND)
    finally:
        waiter.close()
        for run in started:
            run.close_lifeline()
        bench.registry.cleanup()
        bench.channel.forget(tokens)
    return [
        {
            "role": w.role,
            "window_s": window,
            "delta": {k: w.after.get(k, 0) - w.before.get(k, 0) for k in w.before},
            "memory_kib": w.memory,
        }
        for w in watched
    ]


def _stop_politely(run: Started) -> None:
    """Cancel through each contender's own door: SIGTERM to the caller, or EOF on the lifeline."""
    if _door(run.door) == "seed door":
        run.close_lifeline()
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.popen.pid, signal.SIGTERM)


# -- 8. scale ---------------------------------------------------------------------------------

GROUP = 10
#: Up to this many tethers are launched at once (issue 23: "100 callers → all commands
#: running"); more are launched a few at a time, as a machine of two cores can take them.
AT_ONCE = 100


def scale(bench: Bench, sizes: tuple[int, ...], never_after: float) -> list[dict[str, object]]:
    """Tethers by the hundred, all callers SIGKILLed by one ``killpg``: when is all gone?"""
    results = []
    for turn, size in enumerate(sizes):
        for door in _rotate(bench.contenders(), turn):
            bench.say(f"  scale: {size} under {door}")
            results.append(_scale_trial(bench, door, size, never_after))
    return results


@dataclass
class _Many:
    """Many tethers: their tokens, their callers (one process group), what a caller is."""

    tokens: list[str]
    callers: list[int]
    group: int
    caller_is: str
    #: From the first launch until the last command's ``ready`` was read (a shell says it).
    all_running_ms: float | None
    #: Whether every caller was started before any command had to be running.
    at_once: bool


def _launch_many(bench: Bench, door: str, size: int) -> _Many:
    """Start ``size`` sleepers under ``door``, their callers in one process group."""
    doors, env, kind = bench.doors, bench.env(door), _door(door)
    tokens = [doors.token() for _ in range(size)]
    callers: list[int] = []
    group = 0
    in_flight = size if size <= AT_ONCE else 8
    waiter = Waiter(bench.channel)
    asked = time.monotonic()
    try:
        step = 1 if kind == "tether run" else GROUP
        for start in range(0, size, step):
            batch = tokens[start : start + step]
            if kind == "tether run":
                run = doors.tether_run(
                    doors.sleeper(batch[0]), batch[0], process_group=group, env=env
                )
                callers.append(run.popen.pid)
            elif kind == "seed door":
                pipes = [os.pipe() for _ in batch]
                callers.append(doors.holder(tuple(w for _, w in pipes), process_group=group))
                for token, (read_end, _) in zip(batch, pipes, strict=True):
                    doors.seed(doors.sleeper(token), token, read_end=read_end, env=env)
            else:
                sleepers = [doors.sleeper(t) for t in batch]
                callers.append(doors.timeout_under_shell(sleepers, process_group=group))
            group = group or callers[0]
            waiter.until(_enough_ready(bench, set(tokens[: start + len(batch)]), in_flight), BOUND)
        waiter.until(lambda: bench.channel.count("ready", set(tokens)) == size, BOUND * 4)
    finally:
        waiter.close()
    seen = [m.seen for m in bench.channel.messages if m.kind == "ready" and m.token in tokens]
    all_running = _ms(max(seen) - asked) if len(seen) == size else None
    caller_is = {
        "tether run": "one `tether run` process per tether",
        "seed door": f"one holder process per {GROUP} seed-door supervisors",
        "timeout": f"one /bin/sh per {GROUP} `timeout` processes",
    }[kind]
    return _Many(tokens, callers, group, caller_is, all_running, in_flight >= size)


def _enough_ready(bench: Bench, started: set[str], in_flight: int) -> Callable[[], bool]:
    """A condition: at most ``in_flight`` of ``started`` have not announced themselves yet."""
    return lambda: bench.channel.count("ready", started) >= len(started) - in_flight


def _total(memory: list[dict[str, int]]) -> dict[str, int]:
    return {name: sum(m.get(name, 0) for m in memory) for name in ("Pss", "VmRSS", "VmHWM")}


def _scale_trial(bench: Bench, door: str, size: int, never_after: float) -> dict[str, object]:
    result: dict[str, object] = {"door": door, "tethers": size}
    waiter = Waiter(bench.channel)
    tokens: list[str] = []
    try:
        many = _launch_many(bench, door, size)
        tokens = many.tokens
        result["callers"] = many.caller_is
        result["all_running_ms"] = many.all_running_ms
        result["launched_at_once"] = many.at_once
        ready = [m for m in bench.channel.messages if m.kind == "ready" and m.token in set(tokens)]
        result["announced"] = len(ready)
        supervisors = sorted({m.ppid for m in ready})
        for m in ready:
            waiter.watch(f"command {m.pid}", bench.registry.track(m.pid))
        for pid in supervisors:
            bench.registry.track(pid)
        settle(supervisors, quiet=0.5, bound=BOUND * 4)
        memory = [memory_kib(pid) for pid in supervisors]
        result["supervisor_memory_kib"] = _total(memory)
        result["caller_memory_kib"] = _total([memory_kib(pid) for pid in many.callers])
        for pid in supervisors:
            waiter.watch(f"supervisor {pid}", bench.registry.pidfd(pid))
        for pid in many.callers:
            waiter.watch(f"caller {pid}", bench.registry.pidfd(pid))
        commands = [f"command {m.pid}" for m in ready]
        everything = [
            *commands,
            *(f"supervisor {pid}" for pid in supervisors),
            *(f"caller {pid}" for pid in many.callers),
        ]
        with prompt() as result["benchmark_sched_fifo"]:
            asked = time.monotonic()
            os.killpg(many.group, signal.SIGKILL)
            if door == "timeout":
                waiter.until(lambda: False, never_after)
            else:
                waiter.until(lambda: all(name in waiter.gone for name in everything), BOUND * 2)
        if door == "timeout":
            alive = sum(1 for name in commands if name not in waiter.gone)
            result["never"] = {"alive": alive, "after_s": never_after}
            return result
        gone = [waiter.gone[name] - asked for name in commands if name in waiter.gone]
        result["commands_gone"] = len(gone)
        result["last_command_gone_ms"] = _ms(max(gone)) if gone else None
        result["median_command_gone_ms"] = _ms(sorted(gone)[len(gone) // 2]) if gone else None
        last_supervisor = [
            waiter.gone[f"supervisor {pid}"] - asked
            for pid in supervisors
            if f"supervisor {pid}" in waiter.gone
        ]
        result["last_supervisor_gone_ms"] = _ms(max(last_supervisor)) if last_supervisor else None
        callers_gone = [waiter.gone.get(f"caller {pid}", asked) - asked for pid in many.callers]
        result["last_caller_gone_ms"] = _ms(max(callers_gone)) if callers_gone else None
        records = [_record(bench.doors.record_path(t)) for t in tokens]
        result["records"] = sum(1 for r in records if r is not None)
        result["records_parent_lost"] = sum(
            1 for r in records if r is not None and r.get("reason") == "parent_lost"
        )
    finally:
        waiter.close()
        killed = bench.registry.cleanup()
        if door != "timeout":
            result["leftovers_killed"] = len(killed)
        bench.channel.forget(set(tokens))
    return result

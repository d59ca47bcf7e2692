"""Where ``infercast plan`` evaluates its grid: in this process, on a local process pool, or as
Ray tasks.

The grid is cut into work units that keep the planner's reuse: one unit per (layout,
quantization), the points a built model and its priced forwards serve (a group is split by
batch size only when there are fewer groups than processes). Each worker process builds its
own :class:`~infercast.plan.Planner` from the pickled :class:`~infercast.plan.PlanRequest`
and evaluates whole units; results come back in grid order and equal the serial ones.

A local worker takes about 5 s to start (importing torch and transformers, resolving the
model), so the pool's parent process evaluates units too, claiming them from the same
counter as the workers: a grid small enough to finish before the workers are up costs no
more than running it here, and grids under :data:`MIN_POOL_CONFIGS` run here outright.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import queue
import re
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from infercast_adapters import InfercastError

EXECUTORS = ("local", "serial", "ray")
MIN_POOL_CONFIGS = {"fork": 16, "spawn": 200}
"""Below this many configurations the grid runs serially, by how workers start: a forked
worker is ready in about 0.1 s, a spawned one in 6-12 s (importing torch and transformers,
resolving the model), about 200 configurations' work at 1,500 a minute."""
RAY_INSTALL = "pip install 'infercast[ray]' (or pip install ray)"

Progress = Callable[[int, int], None] | None


@dataclass
class Execution:
    """What evaluated the grid: printed with the plan and given in its JSON."""

    executor: str
    processes: int
    units: int
    start_method: str | None = None
    """``fork`` or ``spawn`` for the local pool."""
    reason: str = ""
    units_by_process: dict[str, int] = field(default_factory=dict)
    worker_start_s: float | None = None
    """Seconds from starting the workers to the first one ready (pool), or to a running Ray runtime."""
    address: str | None = None

    def describe(self) -> str:
        text = {"serial": "this process", "local": f"local pool of {self.processes} processes ({self.start_method}ed)",
                "ray": f"Ray ({self.address or 'local runtime'}), {self.processes} CPUs"}[self.executor]
        text += f"; {self.units} work unit{'s' * (self.units != 1)}"
        if self.units_by_process:
            text += " (" + ", ".join(f"{who} {n}" for who, n in self.units_by_process.items()) + ")"
        if self.worker_start_s is not None:
            text += f"; workers ready after {self.worker_start_s:.1f} s"
        return text + (f"; {self.reason}" if self.reason else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def partition(points: Sequence[tuple], processes: int) -> list[list[int]]:
    """Grid indices cut into work units: one per (layout, quantization), the group split by
    batch size (point[2]) into roughly equal parts when there are fewer groups than
    ``processes``. Largest units first, so the last ones to finish are small."""
    groups: dict[Any, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(tuple(point[:2]), []).append(i)
    units = list(groups.values())
    if len(units) < processes:
        parts = -(-processes // len(units))
        units = [chunk for unit in units for chunk in _split_by_batch(points, unit, parts)]
    return sorted(units, key=len, reverse=True)


def _split_by_batch(points: Sequence[tuple], unit: list[int], parts: int) -> list[list[int]]:
    batches = list(dict.fromkeys(points[i][2] for i in unit))
    parts = min(parts, len(batches))
    chunks = [set(batches[k::parts]) for k in range(parts)]
    return [[i for i in unit if points[i][2] in chunk] for chunk in chunks]


# ------------------------------------------------------------------------------ executors


class SerialExecutor:
    """Every point in this process, in grid order."""

    name = "serial"

    def __init__(self, reason: str = "") -> None:
        self.execution = Execution("serial", 1, 1, reason=reason)

    def evaluate(self, planner: Any, points: Sequence[tuple], progress: Progress = None) -> list[Any]:
        configs = []
        for i, point in enumerate(points):
            configs.append(planner.evaluate_point(*point))
            if progress is not None:
                progress(i + 1, len(points))
        return configs


class LocalExecutor:
    """A pool of ``workers`` processes, this one included.

    Workers are forked where that is safe (Linux, no other Python thread in this process, as
    PyTorch's DataLoader forks its workers) and start in a fraction of a second with the
    imports done; elsewhere they are spawned and pay them (:data:`MIN_POOL_CONFIGS`).
    ``start_method`` forces one; ``share=False`` leaves every unit to the workers (``workers``
    of them, for tests of the worker path)."""

    name = "local"

    def __init__(self, workers: int | None = None, start_method: str | None = None, share: bool = True) -> None:
        self.workers = workers or default_workers()
        self.start_method = start_method
        self.share = share
        self.execution = Execution("local", self.workers, 0)

    def evaluate(self, planner: Any, points: Sequence[tuple], progress: Progress = None) -> list[Any]:
        units = partition(points, self.workers)
        reason = own_registries_reason(planner)
        if reason is None and self.share:
            reason = _serial_reason(points, self.workers, self.start_method or start_method())
            if reason is None and len(units) < 2:
                reason = "one work unit (one layout and quantization)"
        if reason is not None:
            serial = SerialExecutor(f"ran here: {reason}")
            self.execution = serial.execution
            return serial.evaluate(planner, points, progress)
        return self._pool(planner, points, units, progress)

    def _pool(self, planner: Any, points: Sequence[tuple], units: list[list[int]], progress: Progress) -> list[Any]:
        import multiprocessing

        method = self.start_method or start_method()
        ctx = multiprocessing.get_context(method)
        counter = ctx.Value("i", 0)
        results = ctx.Queue()
        payload = [[points[i] for i in unit] for unit in units]
        started = time.time()
        procs = [ctx.Process(target=_pool_worker, args=(planner.request, payload, counter, results), daemon=True,
                             name=f"infercast-plan-{k + 1}") for k in range(self.workers - self.share)]
        for proc in procs:
            proc.start()
        configs: list[Any] = [None] * len(points)
        by_process: dict[str, int] = {"this process": 0}
        ready: list[float] = []
        done_units = done_points = 0

        def record(unit: int, got: list[Any], who: str) -> None:
            nonlocal done_units, done_points
            for i, config in zip(units[unit], got):
                configs[i] = config
            by_process[who] = by_process.get(who, 0) + 1
            done_units += 1
            done_points += len(got)
            if progress is not None:
                progress(done_points, len(points))

        def receive(wait: float = 0.0) -> bool:
            """Take one message from the workers (waiting up to ``wait`` s); False when none came."""
            try:
                message = results.get(timeout=wait) if wait else results.get_nowait()
            except queue.Empty:
                return False
            kind, who = message[0], message[1]
            if kind == "ready":
                ready.append(message[2] - started)
            elif kind == "unit":
                _, _, unit, got, traces = message
                planner.traces += traces
                record(unit, got, who)
            else:
                raise _worker_failure(who, message[2])
            return True

        try:
            while self.share:
                with counter.get_lock():
                    unit, counter.value = counter.value, counter.value + 1
                if unit >= len(units):
                    break
                record(unit, [planner.evaluate_point(*points[i]) for i in units[unit]], "this process")
                while receive():
                    pass
            while done_units < len(units):
                if not receive(1.0):
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead or all(p.exitcode == 0 for p in procs):
                        while receive():
                            pass
                        if done_units < len(units):
                            codes = ", ".join(f"{p.name} exit code {p.exitcode}" for p in procs)
                            raise InfercastError(f"a plan worker process stopped before returning its work ({codes})")
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()  # idle or still starting: every unit is in
            for proc in procs:
                proc.join(timeout=10)
            results.close()
        workers = {who: n for who, n in by_process.items() if who != "this process"}
        self.execution = Execution(
            "local", self.workers, len(units), method,
            reason="" if workers else "the workers were not ready before this process finished the grid",
            units_by_process={"this process": by_process["this process"], **dict(sorted(workers.items()))},
            worker_start_s=min(ready) if ready else None)
        return configs


def start_method() -> str:
    """``fork`` on Linux when this process runs no other Python thread; else ``spawn``."""
    import multiprocessing
    import sys
    import threading

    if sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _serial_reason(points: Sequence[tuple], workers: int, method: str) -> str | None:
    """Why the grid is better run in this process than on a pool, or None."""
    if workers < 2:
        return "one worker asked for"
    least = MIN_POOL_CONFIGS[method]
    if len(points) < least:
        return (f"{len(points)} configurations, fewer than {least}: starting {method}ed workers would cost more "
                "than it saves")
    return None


def own_registries_reason(planner: Any) -> str | None:
    """Why workers cannot rebuild ``planner`` from its request (None when they can)."""
    if planner.own_registries:
        return "the planner has its own plugin manager or devices, which worker processes cannot rebuild"
    return None


def _pool_worker(request: Any, units: list[list[tuple]], counter: Any, results: Any) -> None:
    """A pool process: build a Planner, then evaluate units until none is left."""
    who = f"pid {os.getpid()}"
    try:
        from infercast.plan import Planner

        planner = Planner(request)
        results.put(("ready", who, time.time()))
        while True:
            with counter.get_lock():
                unit, counter.value = counter.value, counter.value + 1
            if unit >= len(units):
                return
            before = planner.traces
            got = [planner.evaluate_point(*point) for point in units[unit]]
            results.put(("unit", who, unit, got, planner.traces - before))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", who, _describe_error(exc)))


def _describe_error(exc: BaseException) -> tuple[bool, str]:
    if isinstance(exc, InfercastError):
        return True, str(exc)
    return False, "".join(traceback.format_exception(exc))


def _worker_failure(who: str, error: tuple[bool, str]) -> Exception:
    user_error, text = error
    if user_error:
        return InfercastError(text)
    return RuntimeError(f"plan worker {who} failed:\n{text}")


# ------------------------------------------------------------------------------ Ray

ADDRESS_FORMS = "auto (the cluster this machine belongs to), HOST:PORT (the head's GCS port, 6379 by default) or ray://HOST:PORT (Ray Client)"
_ADDRESS = re.compile(r"^(?P<client>ray://)?(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")


def _parse_ray_address(address: str) -> re.Match | None:
    """The address's parts (None for ``auto``); a malformed one is an error."""
    if address == "auto":
        return None
    match = _ADDRESS.match(address)
    if not match or not 0 < int(match["port"]) < 65536:
        raise InfercastError(f"--ray-address {address!r} is not a Ray address; give {ADDRESS_FORMS}")
    return match


def check_ray_address(address: str) -> None:
    """Fail before the sweep on an address Ray could not use, and on a HOST:PORT nothing answers."""
    match = _parse_ray_address(address)
    if match is None:
        return
    if match["client"]:
        if importlib.util.find_spec("ray.util.client") is None or importlib.util.find_spec("grpc") is None:
            raise InfercastError(f"--ray-address {address} uses Ray Client, which needs pip install 'ray[client]'")
    host = match["host"].strip("[]")
    try:
        socket.create_connection((host, int(match["port"])), timeout=5).close()
    except OSError as exc:
        raise InfercastError(f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); start the "
                             "cluster's head with `ray start --head` or give its address") from None


class RayExecutor:
    """One Ray task per work unit, on the cluster at ``address`` or a local runtime of
    ``workers`` CPUs; a runtime this process already started (``ray.init``) is used as is."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        self.address = address
        self.workers = workers
        self.execution = Execution("ray", workers or 0, 0, address=address)

    def evaluate(self, planner: Any, points: Sequence[tuple], progress: Progress = None) -> list[Any]:
        reason = own_registries_reason(planner)
        if reason is not None:
            serial = SerialExecutor(f"ran here, not on Ray: {reason}")
            self.execution = serial.execution
            return serial.evaluate(planner, points, progress)
        import ray

        started = time.perf_counter()
        owned = not ray.is_initialized()
        if owned:
            _start_ray(ray, self.address, self.workers)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        try:
            units = partition(points, cpus)
            task = ray.remote(num_cpus=1)(_ray_unit)
            request = ray.put(planner.request)
            pending = {task.remote(request, [points[i] for i in unit]): k for k, unit in enumerate(units)}
            ready_s = time.perf_counter() - started
            configs: list[Any] = [None] * len(points)
            by_node: dict[str, int] = {}
            done = 0
            while pending:
                finished, _ = ray.wait(list(pending), num_returns=1)
                unit = units[pending.pop(finished[0])]
                try:
                    got, traces, who = ray.get(finished[0])
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), InfercastError) else None
                    raise (cause or RuntimeError(f"a Ray plan task failed: {exc}")) from None
                planner.traces += traces
                by_node[who] = by_node.get(who, 0) + 1
                for i, config in zip(unit, got):
                    configs[i] = config
                done += len(got)
                if progress is not None:
                    progress(done, len(points))
        finally:
            if owned:
                ray.shutdown()
        self.execution = Execution("ray", cpus, len(units), reason="" if self.address else "a local Ray runtime",
                                   units_by_process=dict(sorted(by_node.items())), worker_start_s=ready_s,
                                   address=self.address)
        return configs


def _start_ray(ray: Any, address: str | None, workers: int | None) -> None:
    # no usage statistics leave the machine unless the user asked for them
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers or default_workers(), include_dashboard=False, log_to_driver=False,
                     _node_ip_address="127.0.0.1")
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = f"--ray-address {address}" if address else "a local Ray runtime"
        raise InfercastError(f"{where}: Ray could not start or connect: {exc}") from None


_RAY_PLANNERS: dict[bytes, Any] = {}
"""Planners built in a Ray worker process, by pickled request: later tasks reuse them."""


def _ray_unit(request: Any, points: list[tuple]) -> tuple[list[Any], int, str]:
    from infercast.plan import Planner

    key = pickle.dumps(request)
    planner = _RAY_PLANNERS.get(key)
    if planner is None:
        planner = _RAY_PLANNERS[key] = Planner(request)
    before = planner.traces
    configs = [planner.evaluate_point(*point) for point in points]
    return configs, planner.traces - before, f"{socket.gethostname()} pid {os.getpid()}"


# ------------------------------------------------------------------------------ the command line


def executor_from_flags(executor: str | None, workers: int | None, ray_address: str | None) -> Any:
    """The executor ``--executor``, ``--workers`` and ``--ray-address`` ask for, checked
    before the sweep (Ray installed, the address well formed and answering)."""
    kind = executor or ("ray" if ray_address else "local")
    if kind not in EXECUTORS:
        raise InfercastError(f"--executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise InfercastError(f"--workers must be a positive number of processes, got {workers}")
    if ray_address is not None and kind != "ray":
        raise InfercastError(f"--ray-address runs the sweep on Ray; drop it or use --executor ray, not {kind}")
    if kind == "serial":
        if workers not in (None, 1):
            raise InfercastError(f"--workers {workers} with --executor serial: serial runs in this process; drop one")
        return SerialExecutor("asked for (--executor serial)")
    if kind == "local":
        return LocalExecutor(workers)
    if ray_address is not None:
        if workers is not None:
            raise InfercastError("--workers sizes the local pool or a local Ray runtime; with --ray-address the "
                                 "cluster's CPUs decide; drop --workers")
        _parse_ray_address(ray_address)
    if importlib.util.find_spec("ray") is None:
        raise InfercastError(f"--executor ray needs Ray, which is not installed: {RAY_INSTALL}")
    if ray_address is not None:
        check_ray_address(ray_address)
    return RayExecutor(ray_address, workers)

"""Sweep execution: work units keep the planner's reuse; a local pool (forked or spawned) and
Ray tasks give exactly the serial results; bad executor flags fail before the sweep."""

from __future__ import annotations

import json
import os
import pickle
import re
import socket
from collections import Counter
from dataclasses import replace

import pytest

from infercast import executor as ex
from infercast.cli import main
from infercast.plan import Planner, PlanRequest, SpecChoice
from infercast.simulate import UserInput

# Two layouts (1 and 2 GPUs), five batches, off + two chains: 30 configurations, 2 work units.
REQUEST = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=(1, 2),
                      batches=(1, 4, 16, 64, 256), tpot_slo_ms=15.0, input_length=1024, output_length=512,
                      speculative=UserInput(speculative_algorithm="EAGLE3",
                                            speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                            accept_length=2.2),
                      spec_grid=(SpecChoice(2, 1, 3), SpecChoice(3, 1, 4)))


@pytest.fixture(scope="module")
def serial():
    return Planner(REQUEST).run()


def test_the_request_pickles_and_units_keep_layout_and_quantization_together() -> None:
    assert pickle.loads(pickle.dumps(REQUEST)) == REQUEST
    points = Planner(REQUEST).grid()
    units = ex.partition(points, 2)
    assert sorted(i for unit in units for i in unit) == list(range(len(points)))  # every point exactly once
    assert len(units) == 2 and all(len({points[i][:2] for i in unit}) == 1 for unit in units)
    # more processes than (layout, quantization) groups: groups split by batch, a batch never split
    units = ex.partition(points, 5)
    assert len(units) == 2 * 3 and sorted(i for unit in units for i in unit) == list(range(len(points)))
    for unit in units:
        assert len({points[i][:2] for i in unit}) == 1
        batches = {points[i][2] for i in unit}
        assert all(points[j][2] not in batches for other in units if other is not unit for j in other
                   if points[j][:2] == points[unit[0]][:2])
    assert [len(u) for u in units] == sorted((len(u) for u in units), reverse=True)


def test_local_pool_workers_give_the_serial_numbers(serial) -> None:
    # every unit evaluated in a forked worker (forced: an earlier test may have left a thread,
    # such as tqdm's monitor, which makes the automatic choice spawn)
    pool = ex.LocalExecutor(2, start_method="fork", share=False)
    result = Planner(REQUEST).run(executor=pool)
    assert result.configs == serial.configs and result.frontier == serial.frontier
    assert result.best == serial.best
    run = result.execution
    assert run["executor"] == "local" and run["units"] == 2 and run["units_by_process"]["this process"] == 0
    workers = {who: n for who, n in run["units_by_process"].items() if who != "this process"}
    assert sum(workers.values()) == 2 and all(who != f"pid {os.getpid()}" for who in workers)
    assert result.traces == serial.traces  # one unit per layout: each forward still traced once


def test_the_parent_shares_the_work_and_small_grids_run_here(serial) -> None:
    result = Planner(REQUEST).run(executor=ex.LocalExecutor(2, start_method="fork"))
    assert result.configs == serial.configs and result.execution["start_method"] == "fork"
    assert sum(result.execution["units_by_process"].values()) == 2
    small = Planner(replace(REQUEST, batches=(1, 4))).run(executor=ex.LocalExecutor(2, start_method="fork"))
    assert small.execution["executor"] == "serial"
    assert re.search(r"12 configurations, fewer than \d+", small.execution["reason"])


def test_a_planner_with_its_own_devices_is_evaluated_here(monkeypatch) -> None:
    """Workers rebuild the planner from the request and the installed registries: a planner given
    its own devices (an H100 with a quarter of its memory) must not be priced with the stock one."""
    from infercast.devices import DeviceRegistry
    from infercast.plugins import get_devices

    small = replace(get_devices().get("H100"), memory_bytes=get_devices().get("H100").memory_bytes // 4)
    own = DeviceRegistry((small,))
    request = replace(REQUEST, mode="static")
    serial = Planner(request, devices=own).run()
    assert sum(c.fits for c in serial.configs) < sum(c.fits for c in Planner(request).run().configs)
    for run in (ex.LocalExecutor(2, start_method="fork", share=False), ex.RayExecutor()):
        monkeypatch.setattr(ex, "_start_ray", lambda *a: pytest.fail("Ray started for a planner it cannot rebuild"))
        result = Planner(request, devices=own).run(executor=run)
        assert result.configs == serial.configs
        assert result.execution["executor"] == "serial" and "own plugin manager or devices" in result.execution["reason"]


@pytest.mark.slow
def test_spawned_workers_give_the_serial_numbers(serial) -> None:
    result = Planner(REQUEST).run(executor=ex.LocalExecutor(2, start_method="spawn", share=False))
    assert result.execution["start_method"] == "spawn" and result.configs == serial.configs


def test_workers_fork_unless_another_python_thread_runs() -> None:
    import threading

    assert ex.start_method() == ("fork" if threading.active_count() == 1 else "spawn")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert ex.start_method() == "spawn"
    finally:
        stop.set()
        thread.join()


def test_cli_reports_what_evaluated_the_grid(capsys) -> None:
    argv = ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1,2", "--batch-sizes",
            "1,8", "--tpot-slo-ms", "15", "--json"]
    assert main([*argv, "--executor", "serial"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["executor"] == "serial"
    assert main(argv) == 0  # the default: a local pool, which runs 4 configurations here and says why
    run = json.loads(capsys.readouterr().out)["execution"]
    assert run["executor"] == "serial" and "4 configurations, fewer than" in run["reason"]
    assert main(argv[:-1] + ["--executor", "serial"]) == 0
    assert "evaluated on: this process" in capsys.readouterr().out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be a positive number"),
    (["--executor", "serial", "--workers", "2"], "--workers 2 with --executor serial"),
    (["--executor", "local", "--ray-address", "auto"], "--ray-address runs the sweep on Ray"),
    (["--ray-address", "head node"], "--ray-address 'head node' is not a Ray address; give auto"),
    (["--ray-address", "127.0.0.1:99999"], "is not a Ray address"),
    (["--ray-address", "auto", "--workers", "4"], "with --ray-address the cluster's CPUs decide"),
    (["--executor", "threads"], "invalid choice: 'threads'"),
    (["--mode", "disagg", "--workers", "2"], "--workers spreads the aggregated grid over processes; --mode disagg"),
])
def test_bad_executor_flags_fail_before_the_sweep(capsys, flags, message) -> None:
    argv = ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", *flags]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's choices
        code = exit_.code
    assert code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_ray_missing_says_how_to_install(monkeypatch, capsys) -> None:
    real = ex.importlib.util.find_spec
    monkeypatch.setattr(ex.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--executor", "ray"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--executor ray needs Ray, which is not installed: pip install 'infercast[ray]'" in err


def test_a_ray_address_where_nothing_answers_is_refused_before_the_sweep(capsys) -> None:
    if ex.importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'infercast[ray]')")
    port = _closed_port()
    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--ray-address", f"127.0.0.1:{port}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--ray-address 127.0.0.1:{port}: nothing answers there" in err and "ray start --head" in err


@pytest.fixture
def ray_runtime(monkeypatch):
    """A local Ray runtime on loopback for one test (usage statistics off)."""
    if os.environ.get("CI"):
        import ray  # the test extras install it: CI must not skip
    else:
        ray = pytest.importorskip("ray", reason="pip install 'infercast[ray]'")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_tasks_give_the_serial_numbers(ray_runtime, serial) -> None:
    run = ex.RayExecutor()
    result = Planner(REQUEST).run(executor=run)
    assert result.configs == serial.configs and result.best == serial.best
    assert run.execution.executor == "ray" and run.execution.units == 2 and run.execution.processes == 2
    tasks = run.execution.units_by_process
    assert sum(tasks.values()) == 2 and not any(who.endswith(f"pid {os.getpid()}") for who in tasks)
    assert ray_runtime.is_initialized()  # a runtime the caller started is left running
    assert Counter(c.layout.num_devices for c in result.configs) == Counter({1: 15, 2: 15})

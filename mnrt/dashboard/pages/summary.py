"""Summary: what was compiled or captured, with which options, for which hardware, its FLOPs,
modelled time and energy, and its goldens."""

from __future__ import annotations

from typing import Any

from ...device.spec import MNCORE2
from ..artifacts import Artifacts
from .common import kernels

TITLE = "Summary"


def _goldens(art: Artifacts) -> list[dict[str, Any]]:
    """Each golden the binary records (name, tolerances), with its result where a run or
    the compile's accuracy check gave one: a run's check is matched to its command (a
    read's check is named for its buffer, which the command does not say); a command's
    first check is its golden's, any other (`--expected`) is a row of its own."""
    results: dict[str, dict] = {}
    report = art.compile_report or {}
    for phase in report.get("phases", []):
        for name, out in ((phase.get("accuracy") or {}).get("outputs") or {}).items():
            results[name] = {"passed": out.get("passed"), "max_abs_err": out.get("max_abs_err")}
    by_command: dict[int, list[dict]] = {}
    for check in (art.run_report or {}).get("checks", []):
        result = {"passed": check.get("passed"), "max_abs_err": check.get("max_abs_err")}
        if isinstance(check.get("command"), int):  # with the tolerances it was checked at
            by_command.setdefault(check["command"], []).append(
                {**{k: check.get(k) for k in ("name", "rtol", "atol")}, **result}
            )
        else:
            results[check.get("name")] = result
    rows = []
    if art.binary_path is not None:
        for i, c in enumerate(art.dump["commands"]):
            cmd = c["cmd"]
            if "golden" not in cmd or not cmd["golden"]:
                continue
            name = cmd.get("name") or f"command {i}"
            checked = by_command.get(i, [])
            rows.append(
                {
                    "name": name,
                    "command": i,
                    "rtol": cmd.get("rtol"),
                    "atol": cmd.get("atol"),
                    "passed": None,  # not checked by anything PATH holds
                    "max_abs_err": None,
                    **results.pop(name, {}),
                    **(checked.pop(0) if checked else {}),
                }
            )
    rows += [
        {"name": n, "command": None, "rtol": None, "atol": None, **r} for n, r in results.items()
    ]
    rows += [{"command": i, **r} for i, found in sorted(by_command.items()) for r in found]
    return rows


def _ranks(run: dict) -> list[tuple[str, Any]]:
    """Where a distributed replay ran: rank 0's report holds every rank's results, another
    rank's only its own devices'."""
    ranks, rank = run.get("ranks"), run.get("rank")
    if not isinstance(ranks, int) or ranks < 2:
        return []
    whose = "every rank's results" if rank == 0 else "its own devices' results only"
    return [("replayed on", f"{ranks} MPI ranks; this is rank {rank}'s report ({whose})")]


def _located(locate: Any) -> list[tuple[str, Any]]:
    """What `mnrt run --locate` found, as the run report holds it (`locate`): how many
    kernels it compared and how many differ, the first divergent and the first wrong
    kernel, and where their arrays were saved."""
    if not isinstance(locate, dict):
        return []
    facts: list[tuple[str, Any]] = [
        ("locate: kernels compared", locate.get("compared")),
        ("locate: of them divergent", locate.get("divergent")),
    ]
    for key, what, saved in (
        ("first_divergent", "first divergent kernel", "saved_to"),
        ("first_wrong", "first wrong kernel", "wrong_saved_to"),
        ("failed", "kernel that failed", None),
    ):
        site = locate.get(key)
        if isinstance(site, dict):
            facts.append((f"locate: {what}", _site(site)))
            if saved and locate.get(saved):
                facts.append(("locate: its arrays in", locate[saved]))
    return facts


def _site(site: dict) -> str:
    verdict = f" ({site['verdict']})" if site.get("verdict") else ""
    return (
        f"command {site.get('command')} program '{site.get('program')}' kernel "
        f"{site.get('program_kernel')} '{site.get('op')}'{verdict}"
    )


def build(art: Artifacts) -> dict[str, Any]:
    report = art.compile_report
    run = art.run_report
    facts: list[tuple[str, Any]] = [("shows", f"{art.kind} {art.path}")]
    if report:
        facts.append(("model", report.get("name")))
        total = report.get("total", {})
        facts += [
            ("FLOPs", total.get("flops")),
            ("modelled device time (s)", total.get("device_time_s")),
            ("modelled energy (J)", total.get("energy_j")),
        ]
    elif art.binary_path is not None and run is None:
        rows = kernels(art)
        timings = art.replayed.report["timings"]
        facts += [
            ("FLOPs", sum(r["flops"] for r in rows)),
            ("modelled device time (s)", timings["device_time_s"]),
            ("modelled energy (J)", timings["energy_j"]),
        ]
        run = art.replayed.report
    if run:
        facts.append(("verdict", run.get("verdict")))
        modelled = run.get("modelled") or {}
        if modelled:
            facts += [
                ("modelled makespan (s)", modelled.get("makespan_s")),
                ("modelled energy, all devices (J)", modelled.get("energy_j")),
                ("of it while devices idle (J)", modelled.get("idle_energy_j")),
                ("bubble fraction", modelled.get("bubble_fraction")),
            ]
        as_run = run.get("modelled_as_run") or {}
        if as_run and as_run.get("makespan_s") != modelled.get("makespan_s"):
            facts.append(("modelled makespan as run, folded (s)", as_run.get("makespan_s")))
        facts += _ranks(run)
        facts += _located(run.get("locate"))
        if run.get("race"):
            facts.append(("race between queues", run["race"]))
    binary = None
    if art.binary_path is not None:
        info = art.info
        binary = {
            "path": str(art.binary_path),
            "producer": info["producer"],
            "version": info["version"],
            "metadata": info["metadata"],
            "device": info["device"],
            "devices": info["devices"],
            "commands": info["commands"],
            "file_bytes": info["file_bytes"],
        }
    hardware = {
        "arch": "MN-Core 2 (emulated, GPFN3)",
        "clock (MHz)": MNCORE2.clock_hz / 1e6,
        **{f"peak {k} (TFLOPS)": v for k, v in MNCORE2.peak_tflops.items()},
        "DRAM bandwidth (GB/s)": MNCORE2.dram_bandwidth / 1e9,
        "board power (W)": MNCORE2.board_power_w,
    }
    return {
        "facts": facts,
        "options": art.options or {},
        "binary": binary,
        "hardware": hardware,
        "goldens": _goldens(art),
        "files": art.files(),
    }

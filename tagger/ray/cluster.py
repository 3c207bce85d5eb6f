"""Ray itself: joining or starting it, fitting the job to its CPUs, and its own failures told
apart from tagger's (a Ray failure says "Ray failed" and what to try, never "please report")."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping

from tagger.errors import RayFailed

# A read task parses an input file into records: brief work, so a fraction of a CPU. A whole
# CPU each (Ray's default) is never free when the actors hold a small cluster's spare CPUs, and
# then the job waits forever with nothing sent.
READ_CPUS = 0.25
# Ray starts its workers at niceness 15 (its `worker_niceness`, to keep the raylet ahead of
# CPU-heavy tasks). Tagger's actors mostly wait on the network and keep a rate limit to the
# millisecond: beside any other work at the default niceness they get a few percent of a CPU,
# wake up to a second late and write their requests in bunches (bench/ray_limiter.py). A Ray
# that tagger starts runs its workers at the default niceness; a cluster the user started is
# theirs to set (`RAY_worker_niceness=0 ray start ...`, docs/ray.md).
WORKER_NICENESS = 0
_NICENESS_VARIABLE = "RAY_worker_niceness"
_LOCAL_ADVICE = (
    "retry; on a busy machine start Ray yourself (`ray start --head`) and pass --ray-address auto"
)


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address`, or start a local one (once per process)."""
    import ray

    if ray.is_initialized():
        return

    def start(system_config: dict[str, int]) -> None:
        ray.init(
            address=address,
            log_to_driver=False,
            include_dashboard=False,
            logging_level=logging.ERROR,  # its info lines would break tagger's progress bar
            _system_config=system_config,
        )

    system_config = local_system_config(address, os.environ)
    try:
        try:
            start(system_config)
        except ValueError as exc:
            # Without an address Ray joins a Ray already started on this machine (`ray start`),
            # whose settings are its own.
            if not system_config or "_system_config" not in str(exc):
                raise
            start({})
    except Exception as exc:  # Ray's start-up and connection errors have no common class
        raise start_failure(address, exc) from None


def local_system_config(address: str | None, environ: Mapping[str, str]) -> dict[str, int]:
    """Ray's settings for a Ray that tagger starts (none for a cluster it joins, nor where the
    user chose the workers' niceness): its workers at the default niceness."""
    joins = environ.get("RAY_ADDRESS", "") not in ("", "local")  # "local": start one
    if address is not None or joins or _NICENESS_VARIABLE in environ:
        return {}
    return {"worker_niceness": WORKER_NICENESS}


def start_failure(address: str | None, exc: BaseException) -> RayFailed:
    """The one line for a Ray that did not start, or a cluster that could not be joined."""
    why = _first_line(exc)
    if address is None:
        return RayFailed(f"Ray failed: a local Ray did not start ({why}): {_LOCAL_ADVICE}")
    token = (
        "a cluster started with `ray start` checks a token: set RAY_AUTH_MODE=token here, with "
        "its token in RAY_AUTH_TOKEN (or ~/.ray/auth_token)"
    )
    if "auth" in why.lower() or "token" in why.lower():
        advice = f"{token}, then rerun"
    else:
        # Ray logs an authentication failure apart from the error it raises: say both.
        advice = (
            "check that the cluster runs (`ray status` on its head node) and the address; "
            f"{token}; then rerun (without --ray-address a local Ray is started)"
        )
    return RayFailed(f"Ray failed: could not join the cluster at {address} ({why}): {advice}")


def actor_cpus(actors: int, wanted: float) -> float:
    """The CPUs each tagging actor asks for: `wanted`, or less (down to none), so that every
    node keeps a whole CPU for Ray Data's own tasks; RayFailed at once if no node has one.

    Ray Data splits the inputs into blocks with tasks of one whole CPU each. Actors holding
    a quarter of a CPU on every node of a small cluster (a 1-CPU head with one actor; three
    1-CPU nodes with three) leave no node a whole CPU: those tasks never run, and the job
    waits forever with nothing sent. An actor mostly waits on the network; it needs no CPU
    reserved to run.
    """
    import ray

    nodes = [node for node in ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]
    cpus = [float(node.get("Resources", {}).get("CPU", 0.0)) for node in nodes]
    if not cpus or max(cpus) < 1:
        raise RayFailed(
            f"Ray failed: no node of the cluster has a whole CPU ({_cpus(cpus)}), and Ray "
            "Data's tasks that split the inputs need one: add a node with `ray start "
            "--address … --num-cpus 1` (or more), or run without --ray-address"
        )
    per_node = math.ceil(actors / len(cpus))  # Ray Data spreads its actors over the nodes
    room = min(cpu - 1.0 for cpu in cpus) / per_node
    return max(0.0, min(wanted, room))


def _cpus(cpus: list[float]) -> str:
    return ", ".join(f"{cpu:g}" for cpu in cpus[:8]) + " CPU" if cpus else "no node alive"


def job_failure(exc: BaseException) -> BaseException:
    """What to raise for an error out of a running Ray job: RayFailed when Ray itself failed
    (a lost node, actor or object), else the error tagger's own code raised (a bug)."""
    import ray.exceptions as rex

    cause: BaseException = exc
    while isinstance(cause, rex.RayTaskError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, rex.RayError):
        return RayFailed(
            f"Ray failed while running the job ({type(cause).__name__}: {_first_line(cause)}): "
            "the rows written so far are kept; rerun the same command to finish"
        )
    return cause


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]

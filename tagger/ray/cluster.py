"""Ray itself: joining or starting it, fitting the job to its CPUs, and its own failures told
apart from tagger's (a Ray failure says "Ray failed" and what to try, never "please report")."""

from __future__ import annotations

import logging

from tagger.errors import RayFailed

# A read task parses an input file into records: brief work, so a fraction of a CPU. A whole
# CPU each (Ray's default) is never free when the actors hold a small cluster's spare CPUs, and
# then the job waits forever with nothing sent.
READ_CPUS = 0.25
# Below this an actor's share is no reservation at all: the cluster is too small for the job.
MIN_ACTOR_CPUS = 0.01
_LOCAL_ADVICE = (
    "retry; on a busy machine start Ray yourself (`ray start --head`) and pass --ray-address auto"
)


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address`, or start a local one (once per process)."""
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(
            address=address,
            log_to_driver=False,
            include_dashboard=False,
            logging_level=logging.ERROR,  # its info lines would break tagger's progress bar
        )
    except Exception as exc:  # Ray's start-up and connection errors have no common class
        raise start_failure(address, exc) from None


def start_failure(address: str | None, exc: BaseException) -> RayFailed:
    """The one line for a Ray that did not start, or a cluster that could not be joined."""
    why = _first_line(exc)
    if address is None:
        return RayFailed(f"Ray failed: a local Ray did not start ({why}): {_LOCAL_ADVICE}")
    if "auth" in why.lower() or "token" in why.lower():
        advice = (
            "the cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
            "(or RAY_AUTH_TOKEN_PATH) to its token, then rerun"
        )
    else:
        advice = (
            "check that the cluster runs (`ray status` on its head node) and the address, "
            "then rerun; without --ray-address a local Ray is started"
        )
    return RayFailed(f"Ray failed: could not join the cluster at {address} ({why}): {advice}")


def actor_cpus(actors: int, wanted: float) -> float:
    """The CPUs each tagging actor asks for, so that the actors and a read task always fit in
    the CPUs the cluster has free; RayFailed at once if they cannot."""
    import ray

    free = float(ray.available_resources().get("CPU", 0.0))  # type: ignore[no-untyped-call]
    room = free - READ_CPUS
    if room / actors < MIN_ACTOR_CPUS:
        raise RayFailed(
            f"Ray failed: the cluster has {free:g} CPU free, and {actors} tagging actors and "
            f"a read task need at least {actors * MIN_ACTOR_CPUS + READ_CPUS:g}: lower "
            "--ray-actors, or add CPUs to the cluster (`ray status` shows what it has)"
        )
    return min(wanted, room / actors)


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

"""Ray's own failures, without starting Ray: a start-up or connection failure, an actor lost
mid-job, a cluster too small for the job; each says "Ray failed" and what to try."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import ray.exceptions as rex  # noqa: E402

from tagger.errors import RayFailed  # noqa: E402
from tagger.ray import cluster  # noqa: E402
from tests.harness import invoke, run_args  # noqa: E402


def _refuse(message: str) -> Any:
    def init(*args: object, **kwargs: object) -> None:
        raise ConnectionError(message)

    return init


def test_a_local_ray_that_does_not_start_says_so_and_what_to_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_server: Any
) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _refuse("The current node timed out during startup."))
    data = tmp_path / "in.jsonl"
    data.write_text('{"abstract": "A text on graphs."}\n')
    fake = fake_server()
    result = invoke([*run_args(data, tmp_path / "out.jsonl", fake.base_url, tmp_path), "--ray"])
    assert result.exit_code == 1, result.output
    assert "Ray failed: a local Ray did not start (The current node timed out" in result.output
    assert "--ray-address" in result.output and "please report" not in result.output
    # Only the driver's canary, sent before Ray is joined (tagger.ray.canary); its answer is in
    # the cache, so a rerun does not pay for it again.
    assert len(fake.chats()) == 1
    from tagger.pipeline.cache import AnswerCache

    cache = AnswerCache(tmp_path)
    try:
        assert cache.stats()["entries"] == 1
    finally:
        cache.close()


def test_a_cluster_that_cannot_be_joined_names_the_address_and_token_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _refuse("Failed to connect to GCS at 10.0.0.1:6379"))
    with pytest.raises(RayFailed, match=r"could not join the cluster at 10.0.0.1:6379.*ray status"):
        cluster.connect("10.0.0.1:6379")
    monkeypatch.setattr(ray, "init", _refuse("Authentication failed: token mismatch"))
    with pytest.raises(RayFailed, match="RAY_AUTH_TOKEN"):
        cluster.connect("auto")


def test_ray_losing_an_actor_is_ray_failing_but_a_bug_in_the_stage_is_a_bug() -> None:
    lost = rex.RayTaskError("map", "traceback", rex.ActorDiedError())
    assert isinstance(cluster.job_failure(lost), RayFailed)
    assert "rerun the same command" in str(cluster.job_failure(lost))
    bug = ValueError("tagger's own mistake")
    assert cluster.job_failure(rex.RayTaskError("map", "traceback", bug)) is bug


def test_actors_leave_every_node_a_whole_cpu_or_the_run_stops_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [{"Alive": True, "Resources": {"CPU": 1.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert cluster.actor_cpus(1, 0.25) == 0.0  # a 1-CPU head: Ray Data's tasks need it whole
    assert cluster.actor_cpus(5, 0.25) == 0.0
    nodes[:] = [{"Alive": True, "Resources": {"CPU": 1.0}}] * 3  # three 1-CPU nodes
    assert cluster.actor_cpus(3, 0.25) == 0.0
    nodes[:] = [{"Alive": True, "Resources": {"CPU": 4.0}}] * 2
    assert cluster.actor_cpus(8, 0.25) == 0.25
    assert cluster.actor_cpus(32, 0.25) == pytest.approx(3 / 16)
    nodes[:] = [{"Alive": True, "Resources": {"CPU": 0.5}}, {"Alive": False}]
    with pytest.raises(RayFailed, match="no node of the cluster has a whole CPU"):
        cluster.actor_cpus(2, 0.25)


def test_a_ray_tagger_starts_runs_its_workers_at_the_default_niceness() -> None:
    # Ray's workers at niceness 15 get a few percent of a CPU beside any other work: the
    # actors then wake late and bunch their requests. Only a Ray tagger starts is set so.
    assert cluster.local_system_config(None, {}) == {"worker_niceness": 0}
    assert cluster.local_system_config("auto", {}) == {}  # a cluster joined: its own settings
    assert cluster.local_system_config(None, {"RAY_ADDRESS": "10.0.0.1:6379"}) == {}
    assert cluster.local_system_config(None, {"RAY_ADDRESS": "local"}) == {"worker_niceness": 0}
    assert cluster.local_system_config(None, {"RAY_worker_niceness": "15"}) == {}  # the user's


def test_without_an_address_a_ray_already_started_here_is_joined_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []

    def init(**kwargs: Any) -> None:
        calls.append(kwargs["_system_config"])
        if kwargs["_system_config"]:  # what Ray says when it finds a `ray start` cluster
            raise ValueError(
                "When connecting to an existing cluster, _system_config must not be provided."
            )

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    cluster.connect(None)
    assert calls == [{"worker_niceness": 0}, {}]

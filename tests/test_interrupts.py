"""Interrupting real `tagger run` subprocesses: SIGKILL at random moments, and Ctrl-C (SIGINT).

The fake server runs in a thread of the test process and records every request, so the tests
can tell which abstracts each (re)started run asked about.
"""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

from tagger.cli.stopping import install_stop_handlers
from tagger.errors import SendingStopped
from tagger.sending.gate import SendGate
from tests.fakeserver import FakeLLM, Recorded
from tests.harness import SAFETY_TIMEOUT, StartTagger, run_args, run_cli, wait_until
from tests.scalehelpers import (
    assert_rows_match,
    cache_entries,
    cached_ids,
    landed,
    read_manifest,
    read_rows,
    requests_by_id,
    write_inputs,
)

# Each answer takes this long, so that a kill or a Ctrl-C lands while requests are in flight.
ANSWER_LATENCY = 0.015


# -- 2. SIGKILL at random moments ------------------------------------------------------------------


def test_sigkill_at_random_moments_loses_nothing(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    llm.latency = ANSWER_LATENCY
    rng = random.Random(20240607)
    out = tmp_path / "out.jsonl"
    cache = tmp_path / "cache"
    log = tmp_path / "tagger.log"

    # A previous, complete run wrote out.jsonl: killed runs must leave it untouched.
    previous = write_inputs(tmp_path / "previous.jsonl", 30, prefix="p", seed=1)
    done = run_cli(run_args(previous.path, out, llm.base_url, cache, "--concurrency", 8), tmp_path)
    assert done.returncode == 0, done.stdout.decode(errors="replace")
    previous_bytes = out.read_bytes()
    assert_rows_match(read_rows(out), previous)

    inputs = write_inputs(tmp_path / "in.jsonl", 400, seed=2)  # more than 3 kills commit
    args = run_args(inputs.path, out, llm.base_url, cache, "--concurrency", 32)
    cached_before: set[str] = set()
    # Each run is killed once it has committed a random number of new answers: the kill lands
    # wherever the run happens to be (mid-request, mid-commit, mid-row), however slow the machine.
    for answers in (rng.randint(1, 100) for _ in range(3)):
        start = landed(llm)
        committed = cache_entries(cache)
        proc = tagger_process(args, tmp_path, log)
        wait_until(
            lambda goal=committed + answers: cache_entries(cache) >= goal,
            f"{answers} new answers in the cache",
            proc,
            log,
        )
        proc.kill()  # SIGKILL: no handler, no cleanup
        assert proc.wait(SAFETY_TIMEOUT) == -signal.SIGKILL
        end = landed(llm)

        assert out.read_bytes() == previous_bytes, "a killed run changed the previous output"
        assert_rows_match(read_rows(out), previous)
        asked = requests_by_id(llm.history[start:end], inputs)
        assert "?" not in asked
        again = sorted(set(asked) & cached_before)
        assert not again, f"a run asked again for {len(again)} cached abstracts: {again[:5]}"
        cached_now = cached_ids(cache, llm.base_url, inputs)
        assert len(cached_now) >= len(cached_before) + answers, "answers seen committed are gone"
        assert cached_before <= cached_now, "the cache lost answers in a kill"
        assert cached_now - cached_before <= set(asked), "cached answers nobody asked for"
        cached_before = cached_now
    assert len(cached_before) < len(inputs.ids), "the kills left nothing to do"

    start = landed(llm)
    proc = tagger_process(args, tmp_path, log)
    assert proc.wait(SAFETY_TIMEOUT) == 0, log.read_text(errors="replace")[-3000:]
    asked = requests_by_id(llm.history[start:], inputs)
    again = sorted(set(asked) & cached_before)
    assert not again, f"the final run asked again for {len(again)} cached abstracts: {again[:5]}"
    assert set(asked) | cached_before == set(inputs.ids)

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    assert {r["id"] for r in rows if r["cached"]} == cached_before
    manifest = read_manifest(out)
    assert manifest["status"] == "complete"
    assert manifest["items"] == manifest["ok"] == len(inputs.ids)


# -- 3. Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_stops_sending_writes_every_row_and_resumes(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    llm.latency = ANSWER_LATENCY
    concurrency = 4
    out = tmp_path / "out.jsonl"
    log = tmp_path / "tagger.log"
    inputs = write_inputs(tmp_path / "in.jsonl", 60, seed=3)  # more than 3 rounds answered
    args = run_args(
        inputs.path, out, llm.base_url, tmp_path / "cache", "--concurrency", concurrency
    )

    # The fake answers only when told, so the test knows exactly what is on the wire.
    llm.hold()
    proc = tagger_process(args, tmp_path, log)
    answered: list[Recorded] = []
    while len(answered) < 2 * concurrency:  # the probe alone, then full rounds
        expected = 1 if not answered else concurrency
        wait_until(lambda n=expected: len(llm.held) >= n, "requests to answer", proc, log)
        answered += llm.release()
    # Every slot now has a request at the server and none can free up: nothing else is
    # on its way. Ctrl-C, then let those finish.
    wait_until(lambda: len(llm.held) >= concurrency, "every slot busy", proc, log)
    on_the_wire = llm.held
    sent = len(llm.history)
    proc.send_signal(signal.SIGINT)
    llm.stop_holding()
    code = proc.wait(SAFETY_TIMEOUT)
    text = log.read_text(errors="replace")

    assert code == 130, text[-3000:]
    landed(llm)
    after = llm.history[sent:]
    assert not after, f"{len(after)} requests were sent after Ctrl-C"

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    ok = {r["id"] for r in rows if r["status"] == "ok"}
    # Everything answered is ok, the requests on the wire at Ctrl-C included; nothing else is.
    assert ok == set(requests_by_id(answered + on_the_wire, inputs))
    assert len(ok) == len(answered) + concurrency < len(inputs.ids)
    for row in rows:
        if row["status"] != "ok":
            assert "interrupted" in row["error"], row["error"]
    manifest = read_manifest(out)
    assert manifest["status"] == "interrupted"
    assert manifest["interrupted"] is True
    assert manifest["ok"] == len(ok)
    # Rows the stop left unanswered are "not run", not failures.
    assert (manifest["not_run"], manifest["failed"]) == (len(rows) - len(ok), 0)

    # The same command again finishes the rest, asking only about what was not done.
    before = len(llm.history)
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stdout.decode(errors="replace")[-3000:]
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    asked = requests_by_id(llm.history[before:], inputs)
    assert set(asked) == set(inputs.ids) - ok
    assert all(len(recs) == 1 for recs in asked.values())
    assert read_manifest(out)["status"] == "complete"


# -- 3. Ctrl-C in the same event-loop turn as a reply ----------------------------------------------


class _Runner:
    """What the stop handlers touch of a LiveRunner, over a real send gate."""

    def __init__(self, gate: SendGate) -> None:
        self.gate = gate
        self.interrupted = False
        self.cancelled = 0

    def request_stop(self, reason: str, *, interrupted: bool = False) -> None:
        self.gate.stop(reason)
        self.interrupted = self.interrupted or interrupted

    def cancel_inflight(self) -> None:
        self.cancelled += 1


def test_ctrl_c_stops_a_sender_that_a_reply_woke_in_the_same_turn() -> None:
    # The flake this pins: a pack's reply and Ctrl-C arrive together; the sender the reply woke
    # ran before the loop's signal callback, passed the gate and sent one more pack.
    gate = SendGate(concurrency=2)
    runner = _Runner(gate)

    async def scenario() -> list[str]:
        restore = install_stop_handlers(runner)  # type: ignore[arg-type]
        try:
            reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def next_pack() -> str:
                await reply  # a pack on the wire; its reply lets the next one go
                try:
                    async with gate.slot():
                        return "sent"
                except SendingStopped:
                    return "not sent"

            sender = asyncio.create_task(next_pack())
            await asyncio.sleep(0)  # it waits for its reply
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, then the reply, in one turn
            reply.set_result(None)
            seen = [await sender, f"interrupted={runner.interrupted}"]
            signal.raise_signal(signal.SIGINT)  # a second Ctrl-C: in-flight requests go now
            while not runner.cancelled:
                await asyncio.sleep(0)
            return seen
        finally:
            restore()

    assert asyncio.run(scenario()) == ["not sent", "interrupted=True"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handed back


# -- 4. Ctrl-C in a notebook: the run's loop is in another thread ---------------------------------


def test_a_notebook_interrupt_stops_sending_before_the_run_loop_turns_again() -> None:
    # In a notebook the KeyboardInterrupt reaches the waiting thread; a cancel scheduled on the
    # run's loop comes a turn later, after the senders replies woke in the meantime: the runners
    # are told to stop from the waiting thread itself, before anything else.
    import threading

    from tagger.calling import RunnerStops, in_worker_thread

    gate = SendGate(concurrency=2)
    runner = _Runner(gate)
    stops = RunnerStops()
    detach = stops.attach(runner)  # type: ignore[arg-type]
    told = threading.Event()
    seen: list[str] = []

    def on_interrupt() -> None:
        stops.stop()
        told.set()

    async def cell() -> None:
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C while a reply is being read here
        told.wait(SAFETY_TIMEOUT)
        try:
            async with gate.slot():  # the sender that reply woke, in the same turn
                seen.append("sent")
        except SendingStopped:
            seen.append("not sent")
        except asyncio.CancelledError:  # the stopped gate let the loop turn: cancelled there
            seen.append("not sent")
            raise
        await asyncio.sleep(SAFETY_TIMEOUT)  # cancelled by the interrupt

    try:
        in_worker_thread(cell, on_interrupt)
    except KeyboardInterrupt:
        seen.append("raised")
    detach()
    assert seen == ["not sent", "raised"] and runner.interrupted
    late = _Runner(SendGate(concurrency=1))
    stops.attach(late)  # type: ignore[arg-type]  # a stage that starts after the interrupt
    assert late.gate.stopped and late.interrupted

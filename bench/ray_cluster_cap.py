"""--max-cost on a real multi-node Ray cluster: does any try go over the cap?

    python bench/ray_cluster_cap.py [--nodes 3] [--tries 6] [--items 300] [--cap 0.02]

Starts a Ray cluster of its own on this machine (`ray start --head` and `--nodes - 1` more
nodes joining it with `ray start --address`, every port chosen free, a temporary folder of its
own: other Ray clusters on the machine are left alone) and runs `tagger run --ray` against an
in-process fake server `--tries` times with `--max-cost`: the first half answer shorter than
tagger's estimate (20 tokens), the second half as long as the token limit lets them (the most
an answer can cost). The figure of merit is the fake's own bill (every answer it sent, priced
as gpt-5.4-nano) against the cap, and the manifest's cost; goal: never over. The cluster is
stopped at the end (its processes only: never `ray stop`, which stops every Ray here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import ROOT, run_args, write_abstracts

from tagger.pricing import PriceTable
from tagger.usage import Usage
from tests.fakeserver import FakeLLM
from tests.harness import taxonomy_ids

MODEL = "gpt-5.4-nano"
# A cluster started with `ray start` checks a token (Ray 2.60): every node and driver uses it.
ENV = {**os.environ, "RAY_AUTH_MODE": "token"}


def free_block(size: int) -> int:
    """The first of `size` consecutive ports none of which is in use now."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20_000, 60_000 - size)
        if all(_free(port) for port in range(first, first + size)):
            return first
    raise RuntimeError(f"no {size} free ports in a row")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


class Cluster:
    """Ray nodes of our own, each `ray start --block` in a process group we can end."""

    def __init__(self, nodes: int, temp: Path) -> None:
        self.port = free_block(200 * nodes + 1)
        self.address = f"127.0.0.1:{self.port}"
        self.temp = temp
        self.nodes: list[subprocess.Popen[bytes]] = []
        try:
            self._start(nodes)
        except BaseException:
            self.stop()
            raise

    def _start(self, nodes: int) -> None:
        temp = self.temp
        # Each node its own block of ports, all different, none in use: a port probed free and
        # closed can be handed out again by the system, so they are not asked of it one by one.
        base = self.port + 1
        for n in range(nodes):
            block = base + 200 * n
            ports = [
                "--node-manager-port", str(block),
                "--object-manager-port", str(block + 1),
                "--dashboard-agent-listen-port", str(block + 2),
                "--dashboard-agent-grpc-port", str(block + 3),
                "--runtime-env-agent-port", str(block + 4),
                "--metrics-export-port", str(block + 5),
                "--min-worker-port", str(block + 10),
                "--max-worker-port", str(block + 199),
            ]  # fmt: skip
            if n == 0:
                role = ["--head", "--port", str(self.port), "--include-dashboard=false",
                        "--temp-dir", str(temp)]  # fmt: skip
            else:
                role = ["--address", self.address]
            command = ["ray", "start", "--block", "--num-cpus", "1", "--disable-usage-stats"]
            log = (temp.parent / f"node{n}.log").open("wb")
            self.nodes.append(
                subprocess.Popen(
                    [*command, *role, *ports],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    env=ENV,
                )
            )
            if n == 0:
                self._wait_for_head(self.nodes[0])
        self._wait_for_nodes(nodes)

    def _wait_for_head(self, head: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and head.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    time.sleep(2)
                    return
            time.sleep(0.5)
        raise RuntimeError("the head node did not start")

    def _wait_for_nodes(self, nodes: int) -> None:
        check = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + 300  # a loaded machine starts nodes slowly
        while time.monotonic() < deadline:
            done = subprocess.run(
                [sys.executable, "-c", check, self.address],
                capture_output=True,
                text=True,
                env=ENV,
            )
            alive = done.stdout.strip().splitlines()[-1:] if done.stdout else []
            if alive and alive[0].isdigit() and int(alive[0]) >= nodes:
                print(f"cluster at {self.address}: {alive[0]} nodes", flush=True)
                return
            time.sleep(2)
        for n in range(nodes):  # why not: each node's last lines (its folder goes at the end)
            log = self.temp.parent / f"node{n}.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-5:]
                print(f"node {n}:", *tail, sep="\n  ", flush=True)
        raise RuntimeError(f"the cluster did not reach {nodes} nodes")

    def stop(self) -> None:
        self._stop_nodes()
        # What a node left behind (a raylet, a worker): our processes only, known by our folder.
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.temp).encode() in command:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def _stop_nodes(self) -> None:
        for node in reversed(self.nodes):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(node.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    node.wait(timeout=20)
                    break
                except subprocess.TimeoutExpired:
                    continue


class Billing:
    """The fake's answers made `completion` tokens long, and its own bill of every answer."""

    def __init__(self, completion: int | None) -> None:
        self.completion = completion  # None: as long as the request's token limit allows
        self.used = Usage()
        self.answers = 0
        self._lock = threading.Lock()

    def __call__(self, user: str, body: dict[str, Any]) -> dict[str, Any]:
        usage = body["usage"]
        if self.completion is not None:
            usage["completion_tokens"] = self.completion
        with self._lock:
            self.used += Usage(usage["prompt_tokens"], usage["completion_tokens"])
            self.answers += 1
        return body


def one_try(url: str, fake: FakeLLM, cluster: Cluster, args: argparse.Namespace, n: int) -> bool:
    long_answers = n >= args.tries // 2
    # At the limit: the prompt's max_tokens (400 for tag@v2), the most a server bills.
    billing = Billing(None if long_answers else 20)
    fake.reply_hook = billing
    if long_answers:
        fake.reply_hook = _at_limit(billing)
    with tempfile.TemporaryDirectory() as tmp:
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items, seed=n)
        out = Path(tmp) / "out.jsonl"
        command = run_args(source, out, url, "--no-cache", "--model", MODEL)
        command += ["--max-cost", str(args.cap), "--concurrency", "8", "-q"]
        command += ["--ray", "--ray-address", cluster.address, "--ray-actors", str(args.actors)]
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "tagger", *command],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=ENV,
        )
        wall = time.monotonic() - began
        manifest_file = out.with_name("out.manifest.json")
        manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
    bill = PriceTable().cost(MODEL, billing.used) or 0.0
    reported = manifest.get("estimated_cost_usd")
    kind = "long" if long_answers else "short"
    print(
        f"try {n + 1} ({kind} answers): exit {done.returncode}, {billing.answers} answered, "
        f"the fake billed ${bill:.5f} of ${args.cap:g} ({bill / args.cap:.1%}), manifest "
        f"${reported}, {manifest.get('refused_requests')} refused, {wall:.0f} s"
        + ("" if done.returncode in (0, 1) else f"\n{done.stderr[-1500:]}"),
        flush=True,
    )
    return bill <= args.cap and (reported is None or reported <= args.cap)


def _at_limit(billing: Billing) -> Any:
    """A reply hook answering with every token the request allowed."""

    def hook(user: str, body: dict[str, Any]) -> dict[str, Any]:
        body["usage"]["completion_tokens"] = 400
        return billing(user, body)

    return hook


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--actors", type=int, default=3)
    parser.add_argument("--tries", type=int, default=6)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--cap", type=float, default=0.02)
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="t30r-", dir="/tmp")) / "ray"
    temp.mkdir()
    fake = FakeLLM(areas=taxonomy_ids()).start()
    fake.keep_bodies = False
    cluster = None
    try:
        cluster = Cluster(args.nodes, temp)
        results = [one_try(fake.base_url, fake, cluster, args, n) for n in range(args.tries)]
    finally:
        if cluster is not None:
            cluster.stop()
        fake.stop()
        shutil.rmtree(temp.parent, ignore_errors=True)
    print(f"{sum(results)}/{len(results)} tries within the cap")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

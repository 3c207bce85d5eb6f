"""Every file tagger creates is created without following a link planted in its place."""

from __future__ import annotations

import json
import math
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.batchhelpers import FAST, batch_run
from tests.harness import (
    SAFETY_TIMEOUT,
    SEEDS_DIR,
    TEST_KEY,
    TaggerCLI,
    clean_env,
    one_line,
    run_args,
    subprocess_cmd,
)


def _victim(cli: TaggerCLI) -> Path:
    victim = cli.tmp / "outside" / "precious.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("not tagger's to overwrite\n")
    return victim


@pytest.mark.parametrize(
    "planted", ["tagged.jsonl.partial", "tagged.manifest.json.tmp", ".tagged.manifest.json.tmp"]
)
def test_links_planted_beside_the_output_are_not_followed(
    tagger_cli: TaggerCLI, planted: str
) -> None:
    victim = _victim(tagger_cli)
    out = tagger_cli.out
    out.parent.mkdir(parents=True)
    (out.parent / planted).symlink_to(victim)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "not tagger's to overwrite\n"
    assert len(tagger_cli.rows()) == 3


def test_a_lock_file_that_is_a_link_is_refused(tagger_cli: TaggerCLI) -> None:
    victim = _victim(tagger_cli)
    out = tagger_cli.out
    out.parent.mkdir(parents=True)
    out.with_name(out.name + ".lock").symlink_to(victim)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 2, result.output
    assert "symlink" in one_line(result.stderr) and "unexpected" not in result.stderr
    assert victim.read_text() == "not tagger's to overwrite\n"
    assert not tagger_cli.fake.history


def test_links_planted_in_the_batch_folder_are_not_followed(tagger_cli: TaggerCLI) -> None:
    victim = _victim(tagger_cli)
    outside = victim.parent
    small = tagger_cli.small_input(3)
    batches = tagger_cli.cache_dir / "batches"
    batches.parent.mkdir(parents=True)
    batches.symlink_to(outside, target_is_directory=True)
    result = batch_run(tagger_cli, inputs=[small])
    assert result.exit_code != 0 and "unexpected" not in result.output
    assert "symlink" in one_line(result.stderr)
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert not [r for r in tagger_cli.fake.history if not r.path.endswith("/models")]

    batches.unlink()
    assert tagger_cli.fake.batches is not None
    tagger_cli.fake.batches.script("hold")
    submitted = tagger_cli.run(*FAST, "--detach", inputs=[small])
    assert submitted.exit_code == 0, submitted.output
    [job] = batches.glob("*.json")
    (batches / f"{job.stem}.cancel").symlink_to(victim)
    cancel = ["batch", "cancel", "--cache-dir", tagger_cli.cache_dir, "--api-key", TEST_KEY]
    cancelled = tagger_cli.invoke(cancel)
    assert cancelled.exit_code == 0, cancelled.output
    assert victim.read_text() == "not tagger's to overwrite\n"

    shutil.rmtree(batches / job.stem)
    (batches / job.stem).symlink_to(outside, target_is_directory=True)
    job.unlink()
    result = tagger_cli.run(*FAST, "--detach", inputs=[small])
    assert result.exit_code != 0 and "symlink" in one_line(result.stderr), result.output
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert victim.read_text() == "not tagger's to overwrite\n"


def _no_file_may_grow() -> None:
    # Writes fail as on a full disk (Python ignores SIGXFSZ).
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_full_disk_at_the_lock_file_is_the_output_error(tagger_cli: TaggerCLI) -> None:
    out = tagger_cli.out
    args = run_args(SEEDS_DIR, out, tagger_cli.fake.base_url, tagger_cli.cache_dir)
    done = subprocess.run(
        subprocess_cmd(*args),
        cwd=tagger_cli.tmp,
        env=clean_env(),
        capture_output=True,
        timeout=SAFETY_TIMEOUT,
        preexec_fn=_no_file_may_grow,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"{out}.lock" in errors[0], stderr
    assert "unexpected" not in stderr and "Traceback" not in stderr
    assert not tagger_cli.fake.history
    assert not out.exists()


def test_every_json_file_written_is_strict_json(tmp_path: Path) -> None:
    from tagger.files.jsonl import write_rows
    from tagger.files.rows import write_json_atomic

    def refuse(name: str) -> object:
        raise AssertionError(f"{name} in a file tagger wrote")

    manifest = tmp_path / "tagged.manifest.json"
    write_json_atomic(manifest, {"cost_usd": math.nan, "prices": [math.inf, 1.5]})
    assert json.loads(manifest.read_text(), parse_constant=refuse) == {
        "cost_usd": None, "prices": [None, 1.5]
    }  # fmt: skip
    rows = tmp_path / "gold.jsonl"
    write_rows(rows, [{"id": "a", "score": -math.inf}])
    assert json.loads(rows.read_text(), parse_constant=refuse) == {"id": "a", "score": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.jsonl", "tagged.manifest.json"]

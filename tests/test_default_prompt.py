"""Without --prompt, the default prompt follows whether the run packs (tagger.prompting.plan).

A run that sends several abstracts per request (OpenAI's API for a model billed a cached-input
price, or --per-request 2 or more) gets the newest `tag` version that packs (tag@v3); any
other run the newest that asks about one abstract (tag@v2), whose plain form a small local
model follows (a 270M model could not follow the pack's wrapper even for one abstract).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tagger.config import BatchConfig, CascadeConfig, ClientConfig, RunConfig
from tagger.errors import ConfigError
from tagger.pipeline.packing import per_request_for
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan, run_prompt
from tagger.prompting.prompts import load_prompt
from tests.fakepack import pack_items
from tests.fakeserver import FakeLLM, first_user_message
from tests.harness import PROMPTS_DIR, StartFake, TaggerCLI, taxonomy_ids

LOCAL = "http://127.0.0.1:8089/v1"
PRICES = PriceTable()


def _config(url: str | None = None, model: str = "gpt-5.4-nano", **given: Any) -> RunConfig:
    client = ClientConfig(model=model, base_url=url)
    return RunConfig(client=client, prompts_dir=PROMPTS_DIR, **given)


@pytest.mark.parametrize(
    ("url", "model", "given", "expected"),
    [
        (None, "gpt-5.4-nano", {}, "tag@v3"),  # OpenAI, cached input billed: 8 per request
        (LOCAL, "gpt-5.4-nano", {}, "tag@v2"),  # a local server: one per request
        ("https://llm.example.com/v1", "gpt-5.4-nano", {}, "tag@v2"),  # not OpenAI's
        (None, "unpriced-model-x", {}, "tag@v2"),  # no cached-input price: one per request
        (None, "gpt-5.4-nano", {"per_request": 1}, "tag@v2"),
        (LOCAL, "gpt-5.4-nano", {"per_request": 4}, "tag@v3"),
        (None, "gpt-5.4-nano", {"batch": BatchConfig()}, "tag@v3"),  # 8 abstracts a line
        (None, "gpt-5.4-nano", {"batch": BatchConfig(), "per_request": 1}, "tag@v2"),
        (LOCAL, "gpt-5.4-nano", {"batch": BatchConfig()}, "tag@v2"),
        (None, "gpt-5.4-nano", {"prompt_ref": "tag@v1"}, "tag@v1"),  # --prompt always wins
        (LOCAL, "gpt-5.4-nano", {"prompt_ref": "tag@v3"}, "tag@v3"),
        (None, "gpt-5.4-nano", {"prompt_ref": "tag-compact@v1"}, "tag-compact@v1"),
        (LOCAL, "gpt-5.4-nano", {"prompt_ref": "tag-compact"}, "tag-compact@v3"),
        (LOCAL, "gpt-5.4-nano", {"prompt_ref": "  "}, "tag@v2"),  # blank: not given
    ],
)
def test_the_default_prompt_follows_whether_the_run_packs(
    url: str | None, model: str, given: dict[str, Any], expected: str
) -> None:
    config = _config(url, model, **given)
    prompt = run_prompt(config, PRICES)
    assert prompt.ref == expected
    assert RunPlan.load(config, PRICES).prompt.ref == expected  # what every driver loads
    if "prompt_ref" not in given:  # it packs exactly when the run does
        assert prompt.packs == (per_request_for(config, prompt, PRICES) > 1)


def test_a_local_server_serving_an_openai_name_still_gets_one_abstract_a_request() -> None:
    # A server that lists the model as OpenAI's gets OpenAI's rules, not OpenAI's pack size:
    # nothing is billed there, so the plain prompt a small model follows.
    config = _config(LOCAL).model_copy(
        update={"client": ClientConfig(model="gpt-5.4-nano", base_url=LOCAL, openai_server=True)}
    )
    prompt = run_prompt(config, PRICES)
    assert (prompt.ref, per_request_for(config, prompt, PRICES)) == ("tag@v2", 1)


def test_a_price_file_moves_the_prompt_and_the_pack_size_together() -> None:
    from tagger.pricing import Price

    uncached = PriceTable({"gpt-5.4-nano": Price(input=0.2, output=1.25)})  # no cached price
    claimed = PriceTable({"my-model": Price(input=1, output=2, cached_input=0.1)})
    for table, model, packs in ((uncached, "gpt-5.4-nano", 1), (claimed, "my-model", 8)):
        config = _config(None, model)
        prompt = run_prompt(config, table)
        assert (prompt.ref, per_request_for(config, prompt, table)) == (
            "tag@v3" if packs > 1 else "tag@v2",
            packs,
        )


def test_a_cascade_chooses_one_prompt_for_both_stages() -> None:
    from tagger.cascade.stages import stage_config

    def prompts(url: str | None, cheap: str, strong: str) -> set[str]:
        config = _config(url, cascade=CascadeConfig(cheap=cheap, strong=strong, target=0.9))
        stages = [stage_config(config, model, []) for model in (cheap, strong)]
        return {run_prompt(stage, PRICES).ref for stage in [config, *stages]}

    assert prompts(None, "gpt-5.4-nano", "unpriced-model-x") == {"tag@v3"}  # either packs
    assert prompts(None, "unpriced-model-x", "gpt-5.4-nano") == {"tag@v3"}
    assert prompts(None, "unpriced-model-x", "unpriced-model-y") == {"tag@v2"}
    assert prompts(LOCAL, "gpt-5.4-nano", "gpt-5.4-mini") == {"tag@v2"}


@pytest.mark.parametrize("url", [None, LOCAL])
def test_a_batch_cascades_live_sample_asks_under_the_batches_prompt(url: str | None) -> None:
    from tagger.cascade.stages import stage_config
    from tagger.prompting.plan import with_prompt_pinned

    cascade = CascadeConfig(cheap="gpt-5.4-nano", strong="unpriced-model-x", target=0.9)
    config = _config(url, cascade=cascade, batch=BatchConfig())
    pinned = with_prompt_pinned(config, PRICES)  # as tagger.cascade.job runs it
    assert pinned.prompt_ref == run_prompt(config, PRICES).ref
    for model in (cascade.cheap, cascade.strong):
        batched = stage_config(pinned, model, [])
        sample = batched.model_copy(update={"batch": None})  # the sample goes live
        assert {run_prompt(stage, PRICES).ref for stage in (batched, sample)} == {pinned.prompt_ref}


def _prompts_dir(tmp_path: Path, versions: dict[int, bool]) -> Path:
    """A prompts folder whose `tag` has the versions given (number: whether it packs)."""
    directory = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, directory)
    shutil.rmtree(directory / "tag")
    shutil.rmtree(directory / "tag-compact")
    (directory / "tag").mkdir()
    for number, packs in versions.items():
        source = PROMPTS_DIR / "tag" / ("v3.toml" if packs else "v2.toml")
        text = source.read_text().replace(f'version = "{source.stem}"', f'version = "v{number}"')
        (directory / "tag" / f"v{number}.toml").write_text(text)
    return directory


@pytest.mark.parametrize(
    ("versions", "packed", "single"),
    [
        ({1: False}, 1, 1),  # nothing packs: the newest for both
        ({1: True}, 1, 1),  # only a packing one: the newest for both
        ({1: False, 2: True, 3: False}, 2, 3),  # a newer plain version is the plain default
        ({1: True, 2: False, 3: True, 4: True}, 4, 2),
    ],
)
def test_the_default_is_the_newest_version_of_its_kind_else_the_newest(
    tmp_path: Path, versions: dict[int, bool], packed: int, single: int
) -> None:
    directory = _prompts_dir(tmp_path, versions)
    assert load_prompt(directory, None, packs=True).version == f"v{packed}"
    assert load_prompt(directory, None, packs=False).version == f"v{single}"
    assert load_prompt(directory, None).version == f"v{max(versions)}"


def test_an_older_version_that_is_broken_is_named_when_it_would_be_the_default(
    tmp_path: Path,
) -> None:
    directory = _prompts_dir(tmp_path, {1: False, 2: True})
    (directory / "tag" / "v1.toml").write_text("name = [")
    assert load_prompt(directory, None, packs=True).version == "v2"  # v1 never read
    with pytest.raises(ConfigError, match=r"v1\.toml: invalid TOML"):
        load_prompt(directory, None, packs=False)


@pytest.fixture
def one_model(fake_server: StartFake) -> FakeLLM:
    """A local server as llama.cpp runs it: one model, listed and answered as."""
    fake = fake_server(areas=taxonomy_ids())
    fake.models = ["gemma-3-270m"]
    fake.answers_as = "gemma-3-270m"
    return fake


def test_a_one_model_local_server_at_defaults_gets_one_plain_abstract_per_request(
    one_model: FakeLLM, cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = TaggerCLI(one_model, tmp_path)
    inputs = [cli.small_input(6)]
    result = cli.run(inputs=inputs)  # no --model, no --prompt, no .env
    assert result.exit_code == 0, result.output
    rows = cli.rows()
    assert [r["status"] for r in rows] == ["ok"] * 6
    assert {(r["model"], r["prompt"], r["prompt_version"]) for r in rows} == {
        ("gemma-3-270m", "tag", "v2")
    }
    assert cli.manifest()["prompt"] == "tag@v2"
    chats = cli.chats()
    assert all(pack_items(first_user_message(r.body or {})) is None for r in chats)
    # The same choice each time: a rerun at defaults is answered from the cache.
    again = cli.run(inputs=inputs)
    assert again.exit_code == 0, again.output
    assert cli.manifest()["cached"] == 6 and len(cli.chats()) == len(chats)
    # --dry-run names the prompt it would use.
    dry = cli.run("--dry-run", inputs=inputs)
    assert dry.exit_code == 0, dry.output
    assert "tag@v2" in dry.output
    # TAGGER_PROMPT is --prompt: it wins over the default.
    monkeypatch.setenv("TAGGER_PROMPT", "tag@v1")
    pinned = cli.run(inputs=[cli.small_input(1)])
    assert pinned.exit_code == 0, pinned.output
    assert [r["prompt_version"] for r in cli.rows()] == ["v1"]


def test_per_request_on_a_local_server_packs_with_the_default_that_packs(
    one_model: FakeLLM, cli_env: Path, tmp_path: Path
) -> None:
    cli = TaggerCLI(one_model, tmp_path)
    result = cli.run("--per-request", 4, inputs=[cli.small_input(9)])
    assert result.exit_code == 0, result.output
    assert {r["prompt_version"] for r in cli.rows()} == {"v3"}
    sizes = [len(pack_items(first_user_message(r.body or {})) or ()) for r in cli.chats()]
    assert sizes == [1, 4, 4]  # the probe alone, then packs
    pinned = cli.run("--per-request", 4, "--prompt", "tag@v2", inputs=[cli.small_input(9)])
    assert pinned.exit_code == 2 and "tag@v2 asks about one abstract" in pinned.output


@pytest.mark.parametrize("planted", ["fifo", "huge"])
def test_a_planted_older_version_is_refused_not_waited_on(tmp_path: Path, planted: str) -> None:
    import os

    from tagger.prompting.prompts import MAX_TOML_BYTES

    directory = _prompts_dir(tmp_path, {1: False, 2: True})
    older = directory / "tag" / "v1.toml"  # read only when a run sends one abstract a request
    older.unlink()
    if planted == "fifo":
        os.mkfifo(older)  # a blocking read would wait for a writer forever
    else:
        older.write_bytes(b"#" * (MAX_TOML_BYTES + 1))
    assert load_prompt(directory, None, packs=True).version == "v2"
    says = "not a regular file" if planted == "fifo" else "over 4 MiB"
    with pytest.raises(ConfigError, match=rf"v1\.toml: {says}"):
        run_prompt(_config(LOCAL).model_copy(update={"prompts_dir": directory}), PRICES)

"""LM data (packing, chat formatting with assistant-only labels), the lm recipe (quality bar
against the unigram entropy, saved model + tokenizer, exact resume) and the lora recipe
(trainable share, loss going down, adapters, merge, bad bases). One workspace per module."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from aifab.core.errors import InvalidInputError
from aifab.data import commit_query, ingest
from aifab.train import text_data

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm" / "data"
FAST = {"system_metrics": False, "threads": 1, "progress": False}
LM = {"block_size": 64, "batch_size": 16, "max_steps": 150, "eval_every": 50, **FAST}


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    """Overrides the per-test workspace: every test here shares one."""
    return module_workspace


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from aifab.models.tokenizer import train_bpe_tokenizer

    texts = [json.loads(line)["text"] for line in (EXAMPLES / "corpus.jsonl").open()]
    return train_bpe_tokenizer(texts[:300], 400)


# ---- data ------------------------------------------------------------------------------------


def test_packing_and_unigram_entropy() -> None:
    blocks = text_data.pack_blocks(list(range(10)), 4)
    assert blocks.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the ragged tail is dropped
    with pytest.raises(InvalidInputError, match="less than one block"):
        text_data.pack_blocks([1, 2], 4)
    assert text_data.unigram_entropy([7, 7, 7]) == 0.0
    assert text_data.unigram_entropy([1, 2, 3, 4]) == pytest.approx(torch.log(torch.tensor(4.0)))


def test_stream_batches_are_a_pure_function_of_the_index() -> None:
    first = [text_data.stream_batch(10, i, 4, seed=3, drop_last=True).tolist() for i in range(4)]
    again = [text_data.stream_batch(10, i, 4, seed=3, drop_last=True).tolist() for i in range(4)]
    assert first == again
    assert sorted(first[0] + first[1]) == sorted(set(first[0] + first[1]))  # one epoch: no repeats
    assert first[2] != first[0]  # the next epoch is reshuffled


def test_length_grouped_batches_pad_less_and_cover_every_row_once_per_epoch() -> None:
    lengths = tuple([1000] * 12 + [20] * 28)  # RAG prompts among short chats
    epoch = [text_data.stream_batch(40, i, 4, seed=3, lengths=lengths).tolist() for i in range(10)]
    assert sorted(i for batch in epoch for i in batch) == list(range(40))
    # Padded to its longest row, a batch of grouped rows wastes nothing here; random ones do.
    grouped = sum(len(b) * max(lengths[i] for i in b) for b in epoch)
    plain = [text_data.stream_batch(40, i, 4, seed=3).tolist() for i in range(10)]
    assert grouped == sum(lengths) < sum(len(b) * max(lengths[i] for i in b) for b in plain)
    again = [text_data.stream_batch(40, i, 4, seed=3, lengths=lengths).tolist() for i in range(10)]
    assert again == epoch  # a pure function of the index: resumes see the same batches
    nxt = [
        text_data.stream_batch(40, i, 4, seed=3, lengths=lengths).tolist() for i in range(10, 20)
    ]
    assert nxt != epoch


def test_chat_rows_and_assistant_only_labels(tokenizer: Any) -> None:
    row = {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
    messages = text_data.row_messages(row)
    assert messages == [
        {"role": "user", "content": "Add the numbers.\n\n2 and 3"},
        {"role": "assistant", "content": "5"},
    ]
    chat = [*messages, {"role": "user", "content": "And 1 and 1?"}]
    chat.append({"role": "assistant", "content": "2"})
    ex = text_data.encode_chat(tokenizer, chat, max_length=200)
    learned = [t for t, label in zip(ex.input_ids, ex.labels, strict=True) if label != -100]
    # Both replies, each with its end-of-turn marker; nothing of the user turns.
    assert tokenizer.decode(learned) == "5<|eos|>\n2<|eos|>\n"
    assert len(ex.input_ids) == len(ex.labels)
    short = text_data.encode_chat(tokenizer, chat, max_length=5)
    assert len(short.input_ids) == 5 and set(short.labels) == {-100}
    kept, dropped = text_data.encode_chats(tokenizer, [chat], max_length=5)
    assert (kept, dropped) == ([], 1)


def test_chat_columns_name_the_accepted_shapes() -> None:
    assert text_data.chat_columns(["messages", "split"]) == ["messages"]
    assert text_data.chat_columns(["instruction", "input", "output"]) == [
        "instruction",
        "output",
        "input",
    ]
    with pytest.raises(InvalidInputError, match="'instruction' and 'output'.*got: text"):
        text_data.chat_columns(["text"])


# ---- lm --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm(module_workspace: Path) -> dict[str, Any]:
    from aifab.train.recipes.lm import main

    ingest("corpus", str(EXAMPLES / "corpus.jsonl"))
    return main({"dataset": "corpus", "register": "tiny-lm", **LM})


def test_lm_validation_loss_beats_the_unigram_entropy(lm: dict[str, Any]) -> None:
    m = lm["metrics"]
    assert m["valid_loss"] < 0.8 * m["unigram_entropy"], m
    assert m["test_loss"] < 0.8 * m["unigram_entropy"]
    assert m["steps"] == 150 and m["num_parameters"] < 200_000
    assert lm["model_version"] == 1


def test_lm_saves_model_with_tokenizer_and_logs_the_run(lm: dict[str, Any]) -> None:
    from aifab.models.checkpoint import load_model
    from aifab.models.tokenizer import load_tokenizer
    from aifab.track.runs import get_run

    model, sidecar = load_model(lm["model_dir"])
    tok = load_tokenizer(lm["model_dir"])
    assert sidecar["builder"] == "causal-lm" and sidecar["meta"]["datasets"][0]["ref"] == "corpus@1"
    ids = torch.tensor([tok("The cow says")["input_ids"]])
    out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    sound = tok.decode(out[0, ids.shape[1] :]).split(".")[0].strip()
    assert sound in {"moo", "woof", "meow", "quack", "baa"}  # it learned what comes next
    run = get_run(lm["run_id"])
    assert run["params"]["recipe"] == "lm"
    assert run["metrics"]["valid_loss"] == pytest.approx(lm["metrics"]["valid_loss"])


def test_lm_pre_tokenizer_option_reaches_the_saved_tokenizer(lm: dict[str, Any]) -> None:
    from aifab.models.tokenizer import load_tokenizer
    from aifab.train.recipes.lm import Config, main

    out = main({"dataset": "corpus", **LM, "max_steps": 2, "pre_tokenizer": "isolated"})
    tok = load_tokenizer(out["model_dir"])
    # digits one token each and the space apart: "1234" is the same ids after a space
    assert tok.convert_ids_to_tokens(tok.encode("1234")) == ["1", "2", "3", "4"]
    assert tok.encode(" 1234")[1:] == tok.encode("1234")
    with pytest.raises(ValueError, match="pre_tokenizer"):
        Config(dataset="corpus", pre_tokenizer="chars")  # type: ignore[arg-type]


def test_lm_resumes_exactly_from_a_checkpoint(lm: dict[str, Any], tmp_path: Path) -> None:
    from aifab.train.checkpointing import list_checkpoints
    from aifab.train.recipes.lm import main

    config = {
        "dataset": "corpus",
        "block_size": 32,
        "batch_size": 4,
        "max_steps": 6,
        "checkpoint_every": 3,
        "checkpoint_dir": str(tmp_path / "ck"),
        **FAST,
    }
    full = main(config)
    last = list_checkpoints(tmp_path / "ck")[-1]
    assert last.name == "step-000000006.pt"
    last.unlink()  # the job "died" after step 3
    resumed = main(config)
    assert resumed["resumed_from"] == 3 and resumed["run_id"] == full["run_id"]
    assert resumed["metrics"]["valid_loss"] == full["metrics"]["valid_loss"]


def test_lm_bad_column_is_named(lm: dict[str, Any]) -> None:
    from aifab.train.recipes.lm import main

    with pytest.raises(InvalidInputError, match="text_column: .*'body'.*columns: text, split"):
        main({"dataset": "corpus", "text_column": "body", **FAST})


def test_recipe_runs_carry_their_scheduler_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep finds a trial's run by this tag (trial.tag_trial_run) for lm, lora and kge too.
    from aifab.track import get_run
    from aifab.train.lifecycle import open_run
    from aifab.train.recipes.lm import Config

    monkeypatch.setenv("AIFAB_JOB_ID", "job-7")
    monkeypatch.setenv("AIFAB_JOB_ATTEMPT", "2")
    run = open_run("lm", Config(dataset="corpus", system_metrics=False), [], None)
    run.end("FINISHED")
    tags = get_run(run.id)["tags"]
    assert tags["aifab.job_id"] == "job-7" and tags["aifab.job_attempt"] == "2"


# ---- lora ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora(lm: dict[str, Any]) -> dict[str, Any]:
    from aifab.train.recipes.lora import main

    ingest("instructions", str(EXAMPLES / "instructions.jsonl"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PEFT calls a deprecated transformers API
        return main(
            {
                "dataset": "instructions",
                "base": "tiny-lm",  # the registered lm model
                "lora": {"r": 4, "alpha": 8},
                "epochs": 3,
                "merge": True,
                "register": "tiny-sft",
                **FAST,
            }
        )


def test_lora_trains_a_small_share_and_lowers_the_loss(lora: dict[str, Any]) -> None:
    m = lora["metrics"]
    assert m["trainable_share"] < 0.05, m
    assert m["trainable_parameters"] > 0
    assert m["valid_loss"] < m["initial_valid_loss"], m
    assert lora["model_version"] == 1


def test_lora_saves_peft_adapters_and_an_equivalent_merged_model(lora: dict[str, Any]) -> None:
    from peft import PeftModel

    from aifab.models.checkpoint import load_model
    from aifab.train.lifecycle import model_directory

    adapter = Path(lora["model_dir"])
    assert {"adapter_config.json", "adapter_model.safetensors", "aifab-adapter.json"} <= {
        p.name for p in adapter.iterdir()
    }
    sidecar = json.loads((adapter / "aifab-adapter.json").read_text())
    assert sidecar["base"] == "tiny-lm" and sidecar["lora"]["r"] == 4
    # The base PEFT's config names is a registry reference that aifab's loader resolves.
    ref = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert ref == sidecar["base_ref"] == "models:/tiny-lm/1"
    base, _ = load_model(model_directory(ref))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        tuned = PeftModel.from_pretrained(base, str(adapter)).eval()
    merged, merged_sidecar = load_model(lora["merged_dir"])
    assert merged_sidecar["meta"]["merged"] is True
    ids = torch.tensor([[1, 20, 30, 40, 50]])
    with torch.no_grad():
        assert torch.allclose(tuned(ids).logits, merged(ids).logits, atol=1e-4)


def test_the_adapter_card_is_a_real_card_whose_loading_code_runs(
    lora: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from aifab.data.catalog import resolve
    from aifab.models.checkpoint import load_model

    adapter = Path(lora["model_dir"])
    card = (adapter / "README.md").read_text(encoding="utf-8")
    assert "More Information Needed" not in card  # not PEFT's blank template
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "peft" and "base_model" not in front  # not a Hub model
    assert front["aifab"] == {"base": "models:/tiny-lm/1", "datasets": ["instructions@1"]}
    data = resolve("instructions@1")
    assert f"| `instructions@1` | `{data.content_hash}` |" in card
    assert "| rank r | 4 |" in card and "| alpha | 8 (updates scaled alpha/r = 2) |" in card
    assert "`q_proj`, `k_proj`, `v_proj`, `o_proj`" in card
    assert f"| valid_loss | {lora['metrics']['valid_loss']:.4g} |" in card
    assert "## Intended use\n\nNot stated: set `intended_use`" in card
    assert "longer than 256 tokens were truncated" in card
    # The card's own PEFT snippet, run as a user would in the adapter's directory.
    code = card.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(adapter)
    scope: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exec(code, scope)
    merged, _ = load_model(lora["merged_dir"])
    ids = torch.tensor([[1, 20, 30, 40, 50]])
    with torch.no_grad():
        tuned = scope["model"](ids).logits
        assert torch.allclose(tuned, merged(ids).logits, atol=1e-4)
    assert scope["tokenizer"]("moo")["input_ids"]


def test_card_fields_and_a_directory_base(lm: dict[str, Any], tmp_path: Path) -> None:
    from aifab.train.recipes.lora import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out = main(
            {
                "dataset": "instructions",
                "base": lm["model_dir"],
                "max_steps": 1,
                "output_dir": str(tmp_path / "a"),
                "intended_use": "Answering farm-animal questions in the demo.",
                "limitations": "English only.",
                **FAST,
            }
        )
    adapter = Path(out["model_dir"])
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(lm["model_dir"]).resolve())
    card = (adapter / "README.md").read_text(encoding="utf-8")
    assert "## Intended use\n\nAnswering farm-animal questions in the demo." in card
    assert "## Limitations\n\nEnglish only.\n\nConversations longer than" in card
    assert f"from_pretrained({str(Path(lm['model_dir']).resolve())!r})" in card


def test_lora_takes_a_messages_dataset(lm: dict[str, Any], tmp_path: Path) -> None:
    from aifab.train.recipes.lora import main

    conversation = (
        "[{'role': 'user', 'content': 'Say moo.'}, {'role': 'assistant', 'content': 'moo'}]"
    )
    commit_query(
        "chats",
        f"SELECT {conversation} AS messages FROM range(12)",
        source="test",
        transform={"kind": "test"},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out = main(
            {
                "dataset": "chats",
                "base": lm["model_dir"],
                "max_steps": 2,
                "output_dir": str(tmp_path / "a"),
                **FAST,
            }
        )
    assert out["steps"] == 2 and (tmp_path / "a" / "adapter_config.json").is_file()


def test_lora_rejects_bad_bases_before_training(
    lm: dict[str, Any], lora: dict[str, Any], tmp_path: Path
) -> None:
    from aifab.train.recipes.lora import main

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")
    config = {"dataset": "instructions", **FAST}
    with pytest.raises(InvalidInputError, match="base: .*notes is not a model directory"):
        main({**config, "base": str(tmp_path / "notes")})
    with pytest.raises(InvalidInputError, match="base: .*no such directory"):
        main({**config, "base": str(tmp_path / "missing")})
    with pytest.raises(InvalidInputError, match="base: 'no-such-model' is neither"):
        main({**config, "base": "no-such-model"})
    with pytest.raises(InvalidInputError, match="an instruction dataset needs"):
        main({**config, "dataset": "corpus", "base": lm["model_dir"]})
    with pytest.raises(InvalidInputError, match="lora.r"):
        main({**config, "base": lm["model_dir"], "lora": {"r": 0}})
    with pytest.raises(InvalidInputError, match="lora.target_modules: .*w_qkv"):
        main({**config, "base": lm["model_dir"], "lora": {"target_modules": ["w_qkv"]}})


def test_shipped_llm_pipeline_configs_validate() -> None:
    from aifab.pipeline.spec import load_pipeline
    from aifab.train.recipes import lm, lora

    spec = load_pipeline(EXAMPLES.parent / "pipeline.yaml")
    steps = {s.name: s.with_ for s in spec.steps if s.uses == "train"}
    assert steps["pretrain"]["recipe"] == "lm" and steps["finetune"]["recipe"] == "lora"
    pretrain = lm.Config.model_validate(steps["pretrain"]["config"])
    finetune = lora.Config.model_validate(steps["finetune"]["config"])
    assert finetune.base == pretrain.register_as  # lora fine-tunes what lm registered


def test_hub_base_without_network_or_cache_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from aifab.core.errors import InvalidInputError
    from aifab.train.lifecycle import model_directory

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(
        InvalidInputError, match="base: cannot get 'org/tiny-llm' from the model hub"
    ):
        model_directory("hf:org/tiny-llm")


def test_lora_trains_and_merges_a_copy_head_base(lora: dict[str, Any], tmp_path: Path) -> None:
    from peft import PeftModel

    from aifab.models.checkpoint import load_model
    from aifab.models.copy_lm import COPY_MODULES, CopyLlamaForCausalLM
    from aifab.train.recipes.lm import main as pretrain
    from aifab.train.recipes.lora import main as finetune

    base_out = pretrain(
        {
            "dataset": "corpus",
            **LM,
            "max_steps": 3,
            "model": {"copy_head": True},
            "output_dir": str(tmp_path / "base"),
        }
    )
    base, _ = load_model(base_out["model_dir"])
    assert isinstance(base, CopyLlamaForCausalLM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out = finetune(
            {
                "dataset": "instructions",  # the lora fixture's
                "base": base_out["model_dir"],
                "lora": {
                    "r": 4,
                    "alpha": 8,
                    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                },
                "max_steps": 4,
                "optim": {"lr": 0.01, "warmup_steps": 0},
                "merge": True,
                "output_dir": str(tmp_path / "sft"),
                **FAST,
            }
        )
        adapter = json.loads((Path(out["model_dir"]) / "adapter_config.json").read_text())
        assert sorted(adapter["modules_to_save"]) == sorted(COPY_MODULES)
        tuned = PeftModel.from_pretrained(base, out["model_dir"]).eval()
    merged, sidecar = load_model(out["merged_dir"])
    assert isinstance(merged, CopyLlamaForCausalLM) and sidecar["config"]["copy_head"] is True
    fresh, _ = load_model(base_out["model_dir"])
    # The copy head trained in full (it is in modules_to_save) and the merge kept it.
    assert not torch.equal(merged.copy_key.weight, fresh.copy_key.weight)
    ids = torch.tensor([[1, 20, 30, 40, 50, 20]])
    with torch.no_grad():
        assert torch.allclose(tuned(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4)


def test_a_pipeline_finetune_reruns_when_its_registered_base_gets_a_new_version(
    lm: dict[str, Any], tmp_path: Path
) -> None:
    """The base is a registry name: a new version of it is a new input, not a cache hit."""
    from aifab.pipeline import run_pipeline
    from aifab.track.registry import register_model

    register_model(lm["run_id"], "model", "pipe-base")
    ingest("pipe-instructions", str(EXAMPLES / "instructions.jsonl"))
    config = {"dataset": "pipe-instructions", "base": "pipe-base", "max_steps": 2, **FAST}
    spec = {
        "name": "tune",
        "steps": [{"name": "tune", "uses": "train", "with": {"recipe": "lora", "config": config}}],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(spec))
    assert run_pipeline(path).step("tune").status == "succeeded"
    assert run_pipeline(path).step("tune").status == "skipped"
    register_model(lm["run_id"], "model", "pipe-base")  # version 2, as a re-run pretrain makes
    again = run_pipeline(path).step("tune")
    assert again.status == "succeeded"
    assert again.inputs["state"] == {"base": "pipe-base@2"}

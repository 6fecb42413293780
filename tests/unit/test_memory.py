"""The memory estimate before a start: the model's size read from config.json is the built model's size, and
each setting moves the estimate the way the memory it stands for moves (the real-run check is in
tests/integration/test_runs.py, next to the run whose peak RSS it reads)."""
import json

import pytest

from backend.config import build_config
from backend.models import ModelError
from backend.models.memory import GiB, ModelShape, estimate_memory, read_shape
from backend.runs import gpus, preflight

SOURCES = [{"type": "regex", "name": "format", "params": {"pattern": "<answer>"}}]


def built_parameters(config: dict) -> int:
    """The parameters of the causal LM transformers builds from `config`, on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    return sum(p.numel() for p in model.parameters())  # tied embeddings are one parameter


def config(mode="sft", **settings):
    base = {"mode": mode, "model": "smollm2-135m-instruct", "max_length": 256, "per_device_train_batch_size": 2}
    if mode in ("grpo", "rloo", "ppo", "online_dpo"):
        base.update(dataset="demo-math", reward_sources=SOURCES)
    if mode == "gkd":
        base["gkd"] = {"teacher": "HuggingFaceTB/SmolLM2-360M-Instruct"}
    if mode in ("dpo", "rm", "orpo", "cpo", "simpo"):
        base["dataset"] = "demo-preference"
    return build_config({**base, **settings})


SHAPE = ModelShape(vocab_size=49152, hidden_size=576, num_layers=30, intermediate_size=1536, num_heads=9,
                   num_kv_heads=3, head_dim=64)  # the embedded model's config.json


def test_the_parameter_count_from_config_json_is_the_built_models_own(tiny_model):
    from backend.models import EMBEDDED_MODEL

    for spec in (str(tiny_model), EMBEDDED_MODEL):
        shape = read_shape(spec)
        folder = tiny_model if spec == str(tiny_model) else tiny_model.parent / EMBEDDED_MODEL
        assert shape.parameters == built_parameters(json.loads((folder / "config.json").read_text())), spec
    assert read_shape(EMBEDDED_MODEL) == SHAPE and SHAPE.parameters == 134_515_008


@pytest.mark.parametrize("variant", [
    {"tie_word_embeddings": False},
    {"attention_bias": True, "mlp_bias": True},
    {"num_key_value_heads": 8, "head_dim": 32},  # no grouped-query attention, heads narrower than hidden / heads
])
def test_untied_biased_and_ungrouped_llama_configs_count_exactly(variant, tmp_path):
    from transformers import LlamaConfig

    sizes = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=3, intermediate_size=320, num_attention_heads=8,
                 num_key_value_heads=2)
    LlamaConfig(**{**sizes, **variant}).save_pretrained(tmp_path)  # config.json as a saved model has it
    saved = json.loads((tmp_path / "config.json").read_text())
    assert read_shape(str(tmp_path)).parameters == built_parameters(saved)


def test_a_gpt2_style_config_is_read_through_its_attribute_map(tmp_path):
    """GPT2Config names its sizes n_embd, n_layer, n_head; its attribute_map says which standard names they are.
    Counted as a Llama-style model (a gated MLP of 4 × hidden, no learned positions): GPT-2's 124M come out within
    a quarter, and the estimate says it is approximate."""
    from transformers import GPT2Config

    GPT2Config().save_pretrained(tmp_path)  # config.json only: GPT-2's own sizes
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "hidden_size" not in saved and saved["n_embd"] == 768
    shape = read_shape(str(tmp_path))
    assert (shape.vocab_size, shape.hidden_size, shape.num_layers, shape.num_heads, shape.head_dim) == \
        (50257, 768, 12, 12, 64)
    assert shape.intermediate_size == 4 * 768 and shape.renamed_from == "gpt2"  # n_inner: null, as GPT-2 has it
    assert abs(shape.parameters / built_parameters(saved) - 1) < 0.25
    assert "gpt2's sizes counted as a Llama-style model's: approximate" in estimate_memory(config(), shape).summary()
    GPT2Config(n_inner=1024).save_pretrained(tmp_path)
    assert read_shape(str(tmp_path)).intermediate_size == 1024
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "not-a-transformers-model", "n_embd": 64}))
    with pytest.raises(ModelError, match="has no vocab_size, hidden_size"):  # nothing maps its names
        read_shape(str(tmp_path))


def test_a_lora_adapter_needs_less_than_full_fine_tuning():
    lora = estimate_memory(config(), SHAPE)
    full = estimate_memory(config(finetuning="full"), SHAPE)
    assert lora.total < full.total
    assert lora.parts["optimizer"] < full.parts["optimizer"] / 100  # r=8 on two projections of 135M weights
    assert full.parts["optimizer"] == SHAPE.parameters * 8  # AdamW: two float32 moments each


def test_dpo_keeps_a_reference_copy_unless_the_adapter_switched_off_is_the_reference():
    sft = estimate_memory(config(finetuning="full"), SHAPE)
    dpo = estimate_memory(config("dpo", finetuning="full"), SHAPE)
    assert dpo.parts["reference model"] == dpo.parts["weights"]
    assert dpo.total - sft.total >= dpo.parts["reference model"]
    lora_dpo = estimate_memory(config("dpo"), SHAPE)
    assert "reference model" not in lora_dpo.parts
    assert lora_dpo.total > estimate_memory(config(), SHAPE).total  # chosen and rejected: twice the sequences


@pytest.mark.parametrize("mode", ["orpo", "cpo", "simpo"])
def test_reference_free_preference_modes_keep_no_reference_but_read_pairs(mode):
    full_dpo = estimate_memory(config("dpo", finetuning="full"), SHAPE)
    full = estimate_memory(config(mode, finetuning="full"), SHAPE)
    assert "reference model" not in full.parts
    assert full.total < full_dpo.total  # no frozen copy of the weights beside the trained ones
    assert full.parts["activations"] > estimate_memory(config(finetuning="full"), SHAPE).parts["activations"]


TEACHER = {"vocab_size": 49152, "hidden_size": 960, "num_hidden_layers": 32, "intermediate_size": 2560,
           "num_attention_heads": 15, "num_key_value_heads": 5}  # SmolLM2-360M's sizes


def test_distillation_counts_the_teachers_weights_in_the_students_dtype_and_its_logits():
    sft = estimate_memory(config(), SHAPE)
    gkd = estimate_memory(config("gkd"), SHAPE, teacher=ModelShape.from_config(TEACHER))
    teacher = ModelShape.from_config(TEACHER)
    assert gkd.parts["teacher model"] == teacher.parameters * 4  # float32 on a CPU, as the LoRA student's base
    assert gkd.parts["activations"] > sft.parts["activations"]  # the teacher's logits over the batch
    assert gkd.total - sft.total > teacher.parameters * 4
    assert estimate_memory(config("gkd"), SHAPE, "cuda").parts["teacher model"] == SHAPE.parameters * 2  # bf16
    unknown = estimate_memory(config("gkd"), SHAPE)
    assert unknown.parts["teacher model"] == SHAPE.parameters * 4
    assert "the teacher counted at the trained model's size" in unknown.summary()
    assert "teacher model" not in sft.parts and "teacher model" not in estimate_memory(config("dpo"), SHAPE).parts


def test_the_teacher_is_read_from_its_config_and_refused_with_another_vocabulary(tmp_path):
    def folder(name, **sizes):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps({**TEACHER, **sizes}))
        return str(path)

    student = folder("student", hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
                     num_attention_heads=9, num_key_value_heads=3)
    teacher, other = folder("teacher"), folder("other", vocab_size=151936)
    estimate = preflight.memory_estimate(config("gkd", model=student, gkd={"teacher": teacher}), tmp_path)
    assert estimate.parts["teacher model"] == ModelShape.from_config(TEACHER).parameters * 4
    assert preflight.teacher_problems(config("gkd", model=student, gkd={"teacher": teacher}), tmp_path) == []
    assert preflight.teacher_problems(config("gkd", model=student, gkd={"teacher": other}), tmp_path) == [
        "gkd.teacher: the teacher's vocabulary has 151936 tokens and the model's 49152; distillation compares their "
        "next-token distributions token by token, so the teacher must share the model's tokenizer (a model of the "
        "same family, or a run trained from the same base)"]
    missing = preflight.teacher_problems(config("gkd", model=student, gkd={"teacher": str(tmp_path / "nope")}),
                                         tmp_path)
    assert len(missing) == 1 and missing[0].startswith("gkd.teacher: ")


def test_online_dpo_samples_a_pair_per_prompt_and_keeps_a_reference_when_fully_fine_tuned():
    grpo = estimate_memory(config("grpo", finetuning="full"), SHAPE)
    online = estimate_memory(config("online_dpo", finetuning="full"), SHAPE)
    assert online.parts["reference model"] == online.parts["weights"]
    assert online.parts["activations"] > grpo.parts["activations"]  # its batch counts prompts, each sampled twice
    assert "reference model" not in estimate_memory(config("online_dpo"), SHAPE).parts  # LoRA: the adapter off


def test_ppo_adds_its_value_model_and_rl_its_reward_models():
    grpo = estimate_memory(config("grpo"), SHAPE)
    assert "value model" not in grpo.parts and "reward models" not in grpo.parts
    separate = estimate_memory(config("ppo", ppo={"value_model": "separate"}), SHAPE)
    shared = estimate_memory(config("ppo", ppo={"value_model": "shared"}), SHAPE)
    assert separate.parts["value model"] >= separate.parts["weights"] > shared.parts["value model"] > 0
    scored = estimate_memory(config("grpo", reward_sources=[
        *SOURCES, {"type": "reward_model", "name": "rm", "params": {"model": "some/reward-model"}}]), SHAPE)
    assert scored.parts["reward models"] == SHAPE.parameters * 4
    assert scored.total - grpo.total == SHAPE.parameters * 4


def test_sharding_divides_what_each_strategy_shards_over_the_processes():
    one = estimate_memory(config(finetuning="full"), SHAPE, "cuda")

    def sharded(**distributed):
        return estimate_memory(config(finetuning="full", num_processes=4, distributed=distributed), SHAPE, "cuda")

    ddp, fsdp = sharded(strategy="ddp"), sharded(strategy="fsdp")
    assert ddp.parts == one.parts  # every process keeps everything
    assert fsdp.parts["weights"] == one.parts["weights"] // 4 and fsdp.parts["optimizer"] == one.parts["optimizer"] // 4
    assert fsdp.overlap["gradients"] == one.overlap["gradients"] // 4
    assert fsdp.parts["activations"] == one.parts["activations"]  # each process has its own micro-batch
    zero1, zero3 = sharded(strategy="deepspeed", zero_stage=1), sharded(strategy="deepspeed", zero_stage=3)
    assert zero1.parts["optimizer"] == one.parts["optimizer"] // 4 and zero1.parts["weights"] == one.parts["weights"]
    assert zero3.parts["weights"] == one.parts["weights"] // 4
    offloaded = sharded(strategy="deepspeed", zero_stage=3, offload=True)
    assert offloaded.parts["optimizer"] == offloaded.parts["weights"] == 0


def test_the_summary_says_what_it_needs_and_whether_it_fits():
    c = config()
    fits = estimate_memory(c, SHAPE, available=[64 * GiB])
    assert fits.fits and fits.summary().startswith("Estimated memory per process: ")
    assert "(weights 0.50 GiB, " in fits.summary() and fits.summary().endswith("fits in the 64 GiB free here")
    short = estimate_memory(c, SHAPE, available=[GiB])
    assert short.fits is False
    assert "does not fit: needs ≈ " in short.summary() and "this machine has 1.00 GiB free" in short.summary()
    two = estimate_memory(config(num_processes=2), SHAPE, "cuda", available=[80 * GiB])
    assert two.fits is False and "2 processes need one GPU each, this machine has 1" in two.summary()
    assert estimate_memory(c, SHAPE).summary().endswith("free memory unknown here")


def test_the_machine_check_is_the_one_that_says_what_memory_there_is(monkeypatch, tmp_path):
    monkeypatch.setattr(gpus, "machine", lambda: gpus.Machine(gpu_ids=("0", "1"), gpu_memory=(80 * GiB, 40 * GiB)))
    assert gpus.memory_here() == ("cuda", [80 * GiB, 40 * GiB])
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
                                                    "intermediate_size": 1536, "num_attention_heads": 9,
                                                    "num_key_value_heads": 3}))
    estimate = preflight.memory_estimate(config(model=str(folder), num_processes=2), tmp_path)
    assert estimate.device == "cuda" and estimate.available == [80 * GiB, 40 * GiB] and estimate.fits
    monkeypatch.setattr(gpus, "machine", lambda: gpus.Machine())
    device, (ram,) = gpus.memory_here()
    assert device == "cpu" and ram > 0


def test_the_run_log_warns_without_refusing_when_the_estimate_does_not_fit(monkeypatch, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
                                                    "intermediate_size": 1536, "num_attention_heads": 9}))
    monkeypatch.setattr(gpus, "memory_here", lambda here=None: ("cpu", [GiB // 2]))
    lines = preflight.memory_lines(config(model=str(folder)), tmp_path)
    assert lines[0].startswith("memory: Estimated memory per process: ") and "does not fit" in lines[0]
    assert lines[1].startswith("warning: the memory estimate exceeds this machine's memory")
    assert preflight.memory_lines(config(model=str(tmp_path / "gone")), tmp_path) == \
        [f"memory: no estimate before the start (model folder {tmp_path / 'gone'} does not exist)"]

"""Generation with the adapter folded into the weights: the same outputs as through the adapter, the very same
weights afterwards, and only where that is exact."""
import pytest
import torch

from backend.config import build_config
from backend.models.merged import mergeable_layers, merged_lora
from backend.modes.fast_generation import merge_for_generation


def _peft(tiny_model, **lora):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, **lora)
    return get_peft_model(model, config).eval()


def test_merged_generation_matches_the_adapter_and_leaves_the_weights_untouched(tiny_model):
    model = _peft(tiny_model, target_modules="all-linear")
    ids = torch.tensor([[1, 5, 9, 12, 40, 7]])
    before = {n: (p, p.detach().clone()) for n, p in model.named_parameters()}
    with torch.no_grad():
        through = model(ids).logits
        with merged_lora(model) as layers:
            merged = model(ids).logits
            greedy = model.generate(ids, max_new_tokens=6, do_sample=False)
        after = model(ids).logits
    assert layers == 2 * 7  # every linear of both layers: q k v o, gate up down
    assert torch.allclose(merged, through, atol=1e-5)
    with model.disable_adapter(), torch.no_grad():
        assert not torch.allclose(model(ids).logits, through, atol=1e-3)  # the adapter does change the output
    assert torch.equal(after, through)
    assert all(p is dict(model.named_parameters())[n] and torch.equal(p, saved) for n, (p, saved) in before.items())
    assert not any(m.merged for m in mergeable_layers(model)) and len(mergeable_layers(model)) == layers
    with torch.no_grad():
        assert torch.equal(greedy, model.generate(ids, max_new_tokens=6, do_sample=False))


def test_a_layer_sharing_its_weight_or_using_dora_is_left_through_the_adapter(tiny_model):
    tied = _peft(tiny_model, target_modules=["lm_head", "q_proj"])
    assert tied.base_model.model.lm_head.base_layer.weight is tied.get_input_embeddings().weight
    assert [type(m).__name__ for m in mergeable_layers(tied)] == ["Linear", "Linear"]  # the two q_proj only
    assert mergeable_layers(_peft(tiny_model, target_modules=["q_proj"], use_dora=True)) == []


@pytest.mark.parametrize("settings, merged, why", [
    ({}, False, "LoRA dropout 0.05 applies while generating"),
    ({"lora": {"dropout": 0.0}}, True, ""),
    ({"rl": {"merged_generation": "on"}}, True, ""),
    ({"lora": {"dropout": 0.0}, "rl": {"merged_generation": "off"}}, False, "rl.merged_generation is off"),
    ({"lora": {"dropout": 0.0}, "finetuning": "full"}, False, "full fine-tuning"),
    ({"lora": {"dropout": 0.0, "use_dora": True}}, False, "DoRA"),
])
def test_when_a_run_generates_merged(settings, merged, why):
    config = build_config({"mode": "grpo", "dataset": "demo-math", **settings,
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    got, reason = merge_for_generation(config)
    assert got == merged and why in reason


def test_a_trainer_generating_in_eval_mode_merges_with_lora_dropout_too():
    config = build_config({"mode": "ppo", "dataset": "demo-math",
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    assert config.lora.dropout > 0 and merge_for_generation(config, dropout_applies=False) == (True, "")


def test_prompts_asked_several_times_are_prefilled_once_and_sample_the_same_completions(tiny_model):
    from transformers import AutoTokenizer

    from backend.models.shared_prefill import generate_sharing_prompts

    model = _peft(tiny_model, target_modules="all-linear")
    tok = AutoTokenizer.from_pretrained(tiny_model, padding_side="left")
    enc = tok([p for p in ("What is 3 + 4?", "Add twelve and nineteen, please.") for _ in range(3)],
              return_tensors="pt", padding=True)
    assert enc.attention_mask[0].sum() != enc.attention_mask[-1].sum()  # left padding differs between prompts
    prefilled = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: prefilled.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)
    settings = {"max_new_tokens": 6, "do_sample": True, "pad_token_id": tok.pad_token_id}
    torch.manual_seed(3)
    shared = generate_sharing_prompts(model.generate, model, enc.input_ids, enc.attention_mask, **settings)
    hook.remove()
    torch.manual_seed(3)
    with torch.no_grad():
        plain = model.generate(**enc, **settings)
    assert torch.equal(shared, plain)
    assert prefilled[0] == (2, enc.input_ids.shape[1] - 1)  # 2 distinct prompts, all but their last token
    torch.manual_seed(3)
    once = generate_sharing_prompts(model.generate, model, enc.input_ids[:1], enc.attention_mask[:1],
                                    num_return_sequences=3, **settings)
    torch.manual_seed(3)
    with torch.no_grad():
        assert torch.equal(once, model.generate(**{k: v[:1] for k, v in enc.items()}, num_return_sequences=3,
                                                **settings))

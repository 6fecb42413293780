"""Generation with the adapter folded into the weights: the same outputs as through the adapter, the very same
weights afterwards, and only where that is exact."""
import contextlib

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


def test_a_gpt2_adapter_that_cannot_merge_is_said_to_generate_through_the_adapter(capsys):
    """GPT-2's projections are Conv1D layers, which merged_lora leaves alone: the log says so rather than a merge
    of 0 layers."""
    from types import SimpleNamespace

    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    from backend.modes.fast_generation import merged_if

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64))
    model = get_peft_model(gpt2, LoraConfig(r=4, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True)).eval()
    trainer = SimpleNamespace(merge_generation=True, accelerator=SimpleNamespace(is_main_process=True))
    for _ in range(2):
        with merged_if(trainer, model):
            pass
    said = capsys.readouterr().out.strip().splitlines()
    assert said == ["generation: through the adapter (no LoRA layer could be merged for generation: the adapted "
                    "layers are Conv1D, not torch Linear layers (GPT-2 style))"]  # once
    assert "merged into the weights" not in said[0]


def test_a_merge_says_how_many_layers(tiny_model, capsys):
    from types import SimpleNamespace

    from backend.modes.fast_generation import merged_if

    trainer = SimpleNamespace(merge_generation=True, accelerator=SimpleNamespace(is_main_process=True))
    with merged_if(trainer, _peft(tiny_model, target_modules=["q_proj", "v_proj"])):
        pass
    assert capsys.readouterr().out == "generation: the adapter merged into the weights (4 layers)\n"


@pytest.mark.parametrize("settings, merged, why", [
    ({"lora": {"dropout": 0.05}}, False, "LoRA dropout 0.05 applies while generating"),
    ({}, True, ""),
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
    config = build_config({"mode": "ppo", "dataset": "demo-math", "lora": {"dropout": 0.05},
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


def _fused_peft(tiny_model, dropout=0.0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as GRPO / RLOO do
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear",
                        init_lora_weights=False)
    return get_peft_model(model, config).train()


def test_the_update_reads_each_prompt_once_with_the_same_log_probs_entropies_and_gradients(tiny_model):
    from backend.models.shared_prefill import decoder_and_head, prompts_read_once

    model = _fused_peft(tiny_model)
    torch.manual_seed(1)
    p, c, group = 9, 5, 3
    prompts = torch.randint(5, 1000, (2, p))
    prompt_mask = torch.ones(2, p, dtype=torch.long)
    prompt_mask[1, :4] = 0  # left padding on the second prompt
    ids = torch.cat([prompts.repeat_interleave(group, 0), torch.randint(5, 1000, (2 * group, c))], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(group, 0), torch.ones(2 * group, c, dtype=torch.long)], 1)
    mask[1, -2:] = 0  # completions ended early
    mask[4, -3:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :p] = -100
    body = decoder_and_head(model)[0]
    rows = []
    hook = body.embed_tokens.register_forward_hook(lambda m, args, out: rows.append(tuple(args[0].shape)))

    def update(shared):
        model.zero_grad()
        with prompts_read_once(body, p) if shared else contextlib.nullcontext():
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        (out.log_probs[:, -c:] * mask[:, p:]).sum().backward()
        grads = {n: w.grad.clone() for n, w in model.named_parameters() if w.requires_grad}
        return out.log_probs[:, -c:].detach(), out.entropy[:, -c:].detach(), grads

    plain, shared = update(False), update(True)
    hook.remove()
    assert rows == [(6, p + c), (2, p), (6, c)]  # each prompt once, then the completions alone
    assert not hasattr(body, "forward") or "forward" not in vars(body)  # the patch is gone
    assert torch.allclose(plain[0], shared[0], atol=1e-5) and torch.allclose(plain[1], shared[1], atol=1e-5)
    assert plain[2].keys() == shared[2].keys() and len(plain[2]) == 2 * 7 * 2
    for name, grad in plain[2].items():
        assert torch.allclose(grad, shared[2][name], rtol=1e-4, atol=1e-5), name
        assert grad.abs().sum() > 0


def test_prompts_that_do_not_repeat_run_as_before(tiny_model):
    from backend.models.shared_prefill import decoder_and_head, prompts_read_once

    model = _fused_peft(tiny_model)
    ids = torch.randint(5, 1000, (3, 8))
    body, rows = decoder_and_head(model)[0], []
    hook = body.embed_tokens.register_forward_hook(lambda m, args, out: rows.append(tuple(args[0].shape)))
    with torch.no_grad(), prompts_read_once(body, 5):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    hook.remove()
    assert rows == [(3, 8)] and out.logits.shape == (3, 8, model.config.vocab_size)


@pytest.mark.parametrize("settings, shared, why", [
    ({}, True, ""),
    ({"rl": {"shared_prompts": False}}, False, "rl.shared_prompts is off"),
    ({"lora": {"dropout": 0.1}}, False, "LoRA dropout 0.1 draws a mask per completion"),
    ({"gradient_checkpointing": True}, False, "gradient checkpointing"),
])
def test_when_the_update_reads_each_prompt_once(settings, shared, why):
    from backend.modes.fast_generation import share_prompts_in_update

    config = build_config({"mode": "grpo", "dataset": "demo-math", **settings,
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    got, reason = share_prompts_in_update(config)
    assert got == shared and why in reason


def test_dropout_while_training_keeps_a_prompt_per_completion(tiny_model):
    from backend.modes.fast_generation import _dropout_active

    assert _dropout_active(_fused_peft(tiny_model, dropout=0.1))
    assert not _dropout_active(_fused_peft(tiny_model)) and not _dropout_active(_fused_peft(tiny_model, 0.1).eval())


def test_the_lm_head_projects_only_the_completion_positions_with_the_same_log_probs(tiny_model, monkeypatch):
    import trl.trainer.utils as trl_utils

    from backend.modes.fast_generation import labelled_positions_only

    model = _fused_peft(tiny_model)
    ids = torch.randint(5, 1000, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, -2:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :8] = -100  # an 8-token prompt, 4-token completions
    projected, fold = [], trl_utils._ChunkedLogProbFunction
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction",
                        type("Counted", (), {"apply": lambda *a: projected.append(a[0].shape[0]) or fold.apply(*a)}))
    checks = trl_utils._use_triton
    with torch.no_grad():
        every = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        with labelled_positions_only():
            labelled = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    assert projected == [3 * 11, 4 + 4 + 2]  # every shifted position, then the labelled ones only
    assert trl_utils._use_triton is checks
    assert torch.allclose(every.log_probs, labelled.log_probs, atol=1e-6)
    assert torch.allclose(every.entropy, labelled.entropy, atol=1e-6)
    assert (labelled.log_probs[:, :7] == 0).all() and (labelled.log_probs[:, 7:] != 0).any()

"""The PPO loop for RLHF on a language model (Ziegler et al. 2019; "The N implementation details of RLHF
with PPO", Huang et al. 2022), written for this project because TRL 1.16 no longer has a PPOTrainer.

One training step = one rollout and its PPO epochs:

1. Rollout (no gradients): sample `num_generations` completions for each of a batch of prompts from the
   policy (base + LoRA), score them with the run's reward sources (weighted sum), and compute per token the
   policy's and the reference's log-probabilities (the reference is the same base with the adapter disabled)
   and the value model's estimates.
2. Rewards and advantages: −kl_coef × KL(π ‖ π_ref) (k1 estimator) on every response token plus the score
   on the last one; GAE(γ, λ) over each response up to its end-of-sequence token; whitened advantages.
3. PPO epochs: `num_ppo_epochs` passes over the rollout in `num_mini_batches` shuffled minibatches, one
   optimizer step per minibatch (accumulated over `gradient_accumulation_steps` micro-batches of
   `per_device_train_batch_size`), clipped policy loss + vf_coef × clipped value loss, gradient clipping.
4. The KL coefficient adapts to a target KL (Ziegler et al.) or stays fixed.

So the rollout batch is per_device_train_batch_size × gradient_accumulation_steps × num_mini_batches
completions per process, `max_steps` counts rollouts, and the learning-rate schedule steps once per rollout.

Why a `transformers.Trainer` subclass with its own `train()`: the worker drives every mode through the same
interface (add_callback / remove_callback, train, save_model, processing_class, state, control), and the
project's StoreCallback (progress, metrics, stop requests) is a TrainerCallback. Subclassing keeps all of that
plus the accelerator, optimizer and scheduler set-up and `log`; only the loop differs, because one PPO step
makes several optimizer steps, which the Trainer's own loop (one optimizer step per step) cannot express.

Dropout is switched off in the policy and the value model (LoRA dropout included): with it, the first
minibatch's ratio π / π_old would not be 1 and the clipping would act on noise.

One module of ~470 lines on purpose: the loop reads top to bottom in the order above; the maths it calls
(GAE, losses, KL control) is in core.py, the value model in value.py, and what resuming needs in checkpoint.py.
"""
from __future__ import annotations

import asyncio
import inspect
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import TrainOutput, speed_metrics

from backend.models.shared_prefill import generate_sharing_prompts
from backend.modes.fast_generation import merged_if
from backend.core.step_timing import PhaseTimer
from backend.ppo import checkpoint, core
from backend.ppo.value import SharedValueHead, decoder_and_head, hidden_states


@dataclass
class PPOConfig(TrainingArguments):
    """The Trainer's arguments plus PPO's; field names follow the run config's `rl` and `ppo` sections."""

    num_generations: int = field(default=1, metadata={"help": "Completions sampled per prompt."})
    max_completion_length: int = field(default=64, metadata={"help": "Tokens generated per completion."})
    max_prompt_length: int = field(default=512, metadata={"help": "Prompts keep their last this many tokens."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (also used for log-probs)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling; 1 samples the full distribution."})
    reward_weights: list[float] | None = field(default=None, metadata={"help": "Weight of each reward function."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda."})
    cliprange: float = field(default=0.2, metadata={"help": "Policy ratio clipping."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Value clipping."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    num_ppo_epochs: int = field(default=4, metadata={"help": "Passes over each rollout."})
    num_mini_batches: int = field(default=1, metadata={"help": "Minibatches (optimizer steps) per PPO epoch."})
    kl_coef: float = field(default=0.05, metadata={"help": "Initial KL penalty coefficient."})
    adaptive_kl: bool = field(default=False, metadata={"help": "Adapt kl_coef towards target_kl."})
    target_kl: float = field(default=6.0, metadata={"help": "Target KL per sequence (nats), adaptive only."})
    horizon: int = field(default=10000, metadata={"help": "Adaptive KL horizon in samples."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whiten the per-token rewards."})
    missing_eos_penalty: float = field(default=0.0, metadata={"help": "Subtracted from truncated responses."})


class PolicyAndValue(nn.Module):
    """One module holding every trainable part, so the optimizer, DDP and the accelerator see one model.

    forward → (logits, values) at the positions that predict the response tokens: position p's hidden state
    gives the distribution of token p + 1 and the value of the state before it.
    """

    def __init__(self, policy: nn.Module, value: nn.Module):
        super().__init__()
        self.policy, self.value = policy, value

    def forward(self, input_ids, attention_mask, position_ids, prompt_width: int):
        hidden = hidden_states(self.policy, input_ids, attention_mask, position_ids)[:, prompt_width - 1:-1]
        logits = decoder_and_head(self.policy)[1](hidden)
        if isinstance(self.value, SharedValueHead):
            values = self.value(hidden)
        else:
            values = self.value(input_ids, attention_mask, position_ids)[:, prompt_width - 1:-1]
        return logits, values


@dataclass
class Rollout:
    """One batch of sampled responses and everything the PPO epochs need, row-aligned."""

    query_responses: torch.Tensor  # (N, P + R) left-padded prompt, then the response
    attention_mask: torch.Tensor  # (N, P + R)
    position_ids: torch.Tensor  # (N, P + R)
    prompt_width: int  # P
    responses: torch.Tensor  # (N, R)
    mask: torch.Tensor  # (N, R) 1 up to and including the first end-of-sequence token
    logprobs: torch.Tensor  # (N, R) under the policy that sampled them
    values: torch.Tensor  # (N, R)
    advantages: torch.Tensor  # (N, R) whitened
    returns: torch.Tensor  # (N, R)
    stats: dict  # rollout metrics for the log


def _disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def _call_reward(func, **kwargs) -> list:
    if inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
        return asyncio.run(func(**kwargs))
    return func(**kwargs)


def _is_conversation(prompt) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt)


class PPOTrainer(Trainer):
    """PPO with a LoRA policy, the adapter-free base as reference and a value model (see backend.ppo.value).

    model: the policy (a PeftModel, or a full causal LM with `ref_model` given); value_model: a
    SeparateValueModel or SharedValueHead; reward_funcs: callables with TRL's reward-function convention
    (`f(prompts, completions, completion_ids, trainer_state, **columns) -> list[float | None]`), weighted by
    args.reward_weights; train_dataset: rows with a `prompt` (text or messages) and any extra columns, which
    the reward functions receive.
    """

    def __init__(self, model, value_model, reward_funcs: list, args: PPOConfig, train_dataset, processing_class,
                 ref_model=None, callbacks=None):
        if ref_model is None and not hasattr(model, "disable_adapter"):
            raise ValueError("PPO needs a reference model: give ref_model, or a PEFT policy whose base (adapter "
                             "disabled) is the reference")
        self.policy, self.value_model, self.ref_model = model, value_model, ref_model
        self.reward_funcs = list(reward_funcs)
        self.reward_names = [getattr(f, "__name__", type(f).__name__) for f in self.reward_funcs]
        weights = args.reward_weights or [1.0] * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ValueError(f"{len(weights)} reward weights for {len(self.reward_funcs)} reward functions")
        self.reward_weights = torch.tensor(weights, dtype=torch.float32)
        _disable_dropout(model)
        _disable_dropout(value_model)
        super().__init__(model=PolicyAndValue(model, value_model), args=args, train_dataset=train_dataset,
                         processing_class=processing_class, callbacks=callbacks)
        if ref_model is not None:
            ref_model.to(self.args.device).eval().requires_grad_(False)
        if args.gradient_checkpointing:
            for m in (model, getattr(value_model, "classifier", None)):
                if m is not None:
                    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        tok = processing_class
        eos = {tok.eos_token_id} | set(self._config_eos(model))
        self.eos_token_ids = sorted(i for i in eos if i is not None)
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_token_ids[0]
        if args.adaptive_kl:
            self.kl_ctl = core.AdaptiveKLController(args.kl_coef, args.target_kl, args.horizon)
        else:
            self.kl_ctl = core.FixedKLController(args.kl_coef)
        self._extra_metrics: dict[str, list[float]] = {}
        self._phases = PhaseTimer()  # each step's generate / score / update seconds

    @staticmethod
    def _config_eos(model) -> list:
        ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        return ids if isinstance(ids, list) else [ids]

    # ---- sizes ----

    @property
    def rollout_size(self) -> int:
        a = self.args
        return a.per_device_train_batch_size * a.gradient_accumulation_steps * a.num_mini_batches

    def _steps(self) -> tuple[int, int]:
        """(prompts per rollout per process, rollouts per epoch of the dataset)."""
        if self.rollout_size % self.args.num_generations:
            raise ValueError(f"the rollout batch ({self.rollout_size} completions) must hold whole groups of "
                             f"{self.args.num_generations} completions per prompt")
        prompts = self.rollout_size // self.args.num_generations
        per_epoch = max(1, len(self.train_dataset) // (prompts * self.accelerator.num_processes))
        return prompts, per_epoch

    def _prompt_batches(self, prompts_per_rollout: int):
        """Endless batches of dataset rows: a fresh seeded shuffle per pass, each process its own share."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        generator = torch.Generator().manual_seed(self.args.seed)
        pending: list[int] = []
        while True:
            while len(pending) < prompts_per_rollout:
                order = torch.randperm(len(self.train_dataset), generator=generator).tolist()
                pending += order[rank::world] or order
            batch, pending = pending[:prompts_per_rollout], pending[prompts_per_rollout:]
            yield [self.train_dataset[i] for i in batch]

    # ---- the loop ----

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs) -> TrainOutput:
        args, acc = self.args, self.accelerator
        prompts_per_rollout, steps_per_epoch = self._steps()
        max_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * steps_per_epoch)
        self.create_optimizer()
        self.create_scheduler(num_training_steps=max_steps, optimizer=self.optimizer)  # one step per rollout
        self._shuffle = torch.Generator().manual_seed(args.seed + 1 + acc.process_index)
        resumed = checkpoint.load_resume_state(self, resume_from_checkpoint) if resume_from_checkpoint else {}
        self.model_wrapped, self.optimizer = acc.prepare(self.model, self.optimizer)
        self.is_in_train = True
        self.state.max_steps, self.state.num_train_epochs = max_steps, math.ceil(max_steps / steps_per_epoch)
        self.state.global_step = resumed.get("step", 0)
        self.state.epoch = self.state.global_step / steps_per_epoch
        self.state.compute_steps(args, max_steps)
        self.control._new_training()
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        batches = self._prompt_batches(prompts_per_rollout)
        for _ in range(self.state.global_step):  # the data order continues where the checkpoint left it
            next(batches)
        start, total_loss = time.time(), resumed.get("total_loss", 0.0)
        self._total_loss = total_loss
        while self.state.global_step < max_steps:
            self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
            step_start = time.time()
            kl_coef = self.kl_ctl.value
            rollout = self._rollout(next(batches), kl_coef)
            update = self._optimize(rollout)
            self.kl_ctl.update(rollout.stats["objective/kl"], self.rollout_size * acc.num_processes)
            learning_rate = self.lr_scheduler.get_last_lr()[0]
            self.lr_scheduler.step()
            self.state.global_step += 1
            self.state.epoch = self.state.global_step / steps_per_epoch
            total_loss += update["loss"]
            self._total_loss = total_loss
            step_time = time.time() - step_start
            logs = {"loss": update["loss"], "reward": rollout.stats["objective/scores"], **rollout.stats, **update,
                    "objective/kl_coef": kl_coef, "learning_rate": learning_rate, "step_time": step_time,
                    **self._phases.take(step_time)}
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_log:
                self.log(logs)
            if self.control.should_save:
                self._save_checkpoint_folder()
            if self.control.should_training_stop:
                break
        steps = self.state.global_step
        metrics = speed_metrics("train", start, num_samples=steps * self.rollout_size * acc.num_processes,
                                num_steps=steps)
        metrics["train_loss"] = total_loss / max(steps, 1)
        self.log(metrics)
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        self.is_in_train = False
        return TrainOutput(steps, metrics["train_loss"], metrics)

    # ---- rollout ----

    def _encode_prompts(self, prompts: list) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and mask; chat prompts get the template and the assistant turn opener."""
        tok, limit = self.processing_class, self.args.max_prompt_length
        encoded = []
        for prompt in prompts:
            if _is_conversation(prompt):
                text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
                ids = tok(text, add_special_tokens=False)["input_ids"]
            else:
                ids = tok(prompt)["input_ids"]
            encoded.append(ids[-limit:])
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        return input_ids.to(self.args.device), mask.to(self.args.device)

    merge_generation = False  # rl.merged_generation (backend/modes/fast_generation.py)

    @torch.no_grad()
    def _generate(self, input_ids, attention_mask) -> torch.Tensor:
        a = self.args
        self.policy.eval()
        with merged_if(self, self.policy):
            out = generate_sharing_prompts(self.policy.generate, self.policy, input_ids, attention_mask,
                                           do_sample=True, max_new_tokens=a.max_completion_length,
                                           temperature=a.temperature, top_p=a.top_p, top_k=0,
                                           pad_token_id=self.pad_token_id, eos_token_id=self.eos_token_ids,
                                           use_cache=True)
        return out[:, input_ids.shape[1]:]

    def _score(self, prompts: list, rows: list[dict], responses: torch.Tensor, mask: torch.Tensor):
        """(per-source scores (N, S) with NaN where a source gave None, completions as the sources saw them)."""
        tok = self.processing_class
        lengths = mask.sum(1).tolist()
        ids = [[t for t in r[:n] if t not in self.eos_token_ids] for r, n in zip(responses.tolist(), lengths)]
        texts = tok.batch_decode(ids, skip_special_tokens=True)
        completions = [[{"role": "assistant", "content": t}] if _is_conversation(p) else t
                       for p, t in zip(prompts, texts)]
        columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
        scores = torch.full((len(prompts), len(self.reward_funcs)), float("nan"))
        for j, func in enumerate(self.reward_funcs):
            out = _call_reward(func, prompts=prompts, completions=completions, completion_ids=ids,
                               trainer_state=self.state, log_extra=lambda *a, **k: None,
                               log_metric=self._log_metric, **columns)
            if len(out) != len(prompts):
                raise ValueError(f"reward function '{self.reward_names[j]}' returned {len(out)} scores for "
                                 f"{len(prompts)} completions")
            scores[:, j] = torch.tensor([float("nan") if s is None else float(s) for s in out])
        return scores, completions

    def _log_metric(self, name: str, value: float) -> None:
        self._extra_metrics.setdefault(name, []).append(float(value))

    @torch.no_grad()
    def _forward_rollout(self, query_responses, attention_mask, position_ids, prompt_width, responses):
        """Log-probs of the policy and of the reference, and values, in chunks of the micro-batch size."""
        model = self.accelerator.unwrap_model(self.model_wrapped)
        model.eval()
        temperature, size = self.args.temperature, self.args.per_device_train_batch_size
        logprobs, ref_logprobs, values = [], [], []
        for s in range(0, query_responses.shape[0], size):
            batch = (query_responses[s:s + size], attention_mask[s:s + size], position_ids[s:s + size])
            logits, value = model(*batch, prompt_width)
            logprobs.append(core.token_logprobs(logits, responses[s:s + size], temperature))
            values.append(value)
            del logits
            ref_logits = self._reference_logits(*batch, prompt_width)
            ref_logprobs.append(core.token_logprobs(ref_logits, responses[s:s + size], temperature))
        return torch.cat(logprobs), torch.cat(ref_logprobs), torch.cat(values)

    def _reference_logits(self, input_ids, attention_mask, position_ids, prompt_width):
        ref = self.ref_model if self.ref_model is not None else self.policy
        with self.policy.disable_adapter() if self.ref_model is None else nullcontext():
            hidden = hidden_states(ref, input_ids, attention_mask, position_ids)[:, prompt_width - 1:-1]
            return decoder_and_head(ref)[1](hidden)

    def _rollout(self, rows: list[dict], kl_coef: float) -> Rollout:
        a = self.args
        rows = [row for row in rows for _ in range(a.num_generations)]
        prompts = [row["prompt"] for row in rows]
        prompt_ids, prompt_mask = self._encode_prompts(prompts)
        with self._phases.phase("generate"):
            responses = self._generate(prompt_ids, prompt_mask)
        mask, ended = core.response_mask(responses, self.eos_token_ids)
        responses = responses.masked_fill(mask == 0, self.pad_token_id)
        with self._phases.phase("score"):
            per_source, completions = self._score(prompts, rows, responses, mask)
        weights = self.reward_weights.to(per_source.device)
        scores = torch.nansum(per_source * weights, dim=1)  # a None score counts 0, as in TRL
        scores = scores.to(responses.device)
        if a.missing_eos_penalty:
            scores = scores - a.missing_eos_penalty * (~ended).float()

        width = prompt_ids.shape[1]
        query_responses = torch.cat([prompt_ids, responses], dim=1)
        attention_mask = torch.cat([prompt_mask, mask], dim=1)
        position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
        logprobs, ref_logprobs, values = self._forward_rollout(query_responses, attention_mask, position_ids,
                                                               width, responses)
        maskf = mask.float()
        values = values * maskf
        kl = core.kl_per_token(logprobs, ref_logprobs) * maskf
        rewards = core.token_rewards(scores, kl, mask, kl_coef)
        rlhf_reward = rewards.sum(1)
        if a.whiten_rewards:
            rewards = core.masked_whiten(rewards, mask, shift_mean=False)
        advantages, returns = core.compute_gae(rewards, values, mask, a.gamma, a.lam)
        advantages = core.masked_whiten(advantages, mask)

        stats = self._rollout_stats(scores, per_source, kl, kl_coef, rlhf_reward, logprobs, mask, ended)
        return Rollout(query_responses, attention_mask, position_ids, width, responses, mask, logprobs, values,
                       advantages, returns, stats)

    def _rollout_stats(self, scores, per_source, kl, kl_coef, rlhf_reward, logprobs, mask, ended) -> dict:
        acc = self.accelerator
        lengths = mask.sum(1).float()
        local = torch.stack([scores, kl.sum(1), -kl_coef * kl.sum(1), rlhf_reward, -(logprobs * mask).sum(1),
                             lengths, (~ended).float()], dim=1)
        every = acc.gather(local).float().cpu()
        means = every.mean(0).tolist()
        stats = {"objective/scores": means[0], "objective/kl": means[1], "objective/non_score_reward": means[2],
                 "objective/rlhf_reward": means[3], "objective/entropy": means[4],
                 "completions/mean_length": means[5], "completions/min_length": every[:, 5].min().item(),
                 "completions/max_length": every[:, 5].max().item(), "completions/clipped_ratio": means[6],
                 "objective/scores_std": every[:, 0].std().item() if every.shape[0] > 1 else 0.0}
        sources = acc.gather(per_source.to(acc.device)).float().cpu()
        for j, name in enumerate(self.reward_names):
            col = sources[:, j]
            col = col[~torch.isnan(col)]
            stats[f"rewards/{name}/mean"] = col.mean().item() if len(col) else float("nan")
            stats[f"rewards/{name}/std"] = col.std().item() if len(col) > 1 else 0.0
        for name, values in self._extra_metrics.items():
            stats[name] = sum(values) / len(values)
        self._extra_metrics = {}
        return stats

    # ---- PPO epochs ----

    def _optimize(self, r: Rollout) -> dict:
        a, acc, model = self.args, self.accelerator, self.model_wrapped
        model.train()
        n, micro = r.responses.shape[0], a.per_device_train_batch_size
        minibatch = n // a.num_mini_batches
        sums: dict[str, float] = {}
        counts = {"micro": 0, "optimizer": 0}

        def add(name, value):
            sums[name] = sums.get(name, 0.0) + float(value)

        for _ in range(a.num_ppo_epochs):
            order = torch.randperm(n, generator=self._shuffle).to(r.responses.device)
            for start in range(0, n, minibatch):
                rows = order[start:start + minibatch]
                chunks = list(rows.split(micro))
                for i, idx in enumerate(chunks):
                    last = i == len(chunks) - 1
                    with acc.no_sync(model) if not last else nullcontext():
                        logits, vpred = model(r.query_responses[idx], r.attention_mask[idx], r.position_ids[idx],
                                              r.prompt_width)
                        logprobs = core.token_logprobs(logits, r.responses[idx], a.temperature)
                        mask = r.mask[idx]
                        pg_loss, pg_stats = core.policy_loss(logprobs, r.logprobs[idx], r.advantages[idx], mask,
                                                             a.cliprange)
                        vf_loss, vf_stats = core.value_loss(vpred, r.values[idx], r.returns[idx], mask,
                                                            a.cliprange_value)
                        loss = pg_loss + a.vf_coef * vf_loss
                        acc.backward(loss / len(chunks))
                    with torch.no_grad():
                        entropy = core.masked_mean(core.entropy_from_logits(logits, a.temperature), mask)
                    del logits
                    counts["micro"] += 1
                    for name, value in (("loss", loss), ("loss/policy", pg_loss), ("loss/value", vf_loss),
                                        ("policy/approxkl", pg_stats["approxkl"]),
                                        ("policy/clipfrac", pg_stats["clipfrac"]), ("policy/ratio", pg_stats["ratio"]),
                                        ("val/clipfrac", vf_stats["clipfrac"]), ("policy/entropy", entropy),
                                        ("val/mean", core.masked_mean(vpred.detach(), mask))):
                        add(name, value.detach())
                if a.max_grad_norm and a.max_grad_norm > 0:
                    norm = acc.clip_grad_norm_(model.parameters(), a.max_grad_norm)
                    add("grad_norm", norm.detach() if torch.is_tensor(norm) else norm)
                self.control = self.callback_handler.on_pre_optimizer_step(a, self.state, self.control)
                self.optimizer.step()
                self.control = self.callback_handler.on_optimizer_step(a, self.state, self.control)
                self.optimizer.zero_grad(set_to_none=True)
                counts["optimizer"] += 1
        means = {k: v / (counts["optimizer"] if k == "grad_norm" else counts["micro"]) for k, v in sums.items()}
        names = list(means)
        reduced = acc.reduce(torch.tensor([means[k] for k in names], device=acc.device), reduction="mean")
        return dict(zip(names, reduced.tolist()))

    # ---- saving ----

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The policy (its LoRA adapter, or the full model) in output_dir, the value model in output_dir/value,
        plus the tokenizer and the training arguments. Main process only."""
        output_dir = Path(output_dir or self.args.output_dir)
        if not self.args.should_save:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self.policy.save_pretrained(str(output_dir))
        self.value_model.save(output_dir / "value")
        if self.processing_class is not None:
            self.processing_class.save_pretrained(str(output_dir))
        torch.save(self.args, output_dir / "training_args.bin")

    def _save_checkpoint_folder(self) -> None:
        folder = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        self.save_model(folder)
        checkpoint.save_resume_state(self, folder)
        self.accelerator.wait_for_everyone()  # trainer_state.json, the mark of a complete folder, comes last
        if self.args.should_save:
            self.state.save_to_json(os.path.join(folder, "trainer_state.json"))
            checkpoint.drop_old_checkpoints(self.args.output_dir, self.args.save_total_limit)
        self.control = self.callback_handler.on_save(self.args, self.state, self.control)

"""PPO's arithmetic as pure tensor functions: masked statistics, per-token KL, rewards, GAE and the clipped
losses. No model, no state: each is checked in tests/unit/test_ppo_core.py against plain Python loops.

Shapes: (B, T) over the response tokens of B sequences. `mask` is 1 on a response's real tokens (up to and
including its first end-of-sequence token) and 0 on the padding after it, so every row's valid tokens form a
prefix. References: Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences";
Huang et al. 2022, "The N implementation details of RLHF with PPO"; Schulman et al. 2016 (GAE), 2017 (PPO).
"""
from __future__ import annotations

import torch


# ---- masked statistics ----

def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (all of them, or along `dim`)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of x over the masked positions (Bessel-corrected unless `unbiased` is False)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        if n > 1:
            var = var * n / (n - 1)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """x scaled to unit variance over the masked positions, and centred on 0 unless `shift_mean` is False
    (rewards are whitened without re-centring, so their sign survives). Masked-out positions come back 0."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(x.dtype)


# ---- log-probabilities, entropy and KL ----

def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(token) under logits / temperature: the distribution the tokens were sampled from."""
    logps = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logps.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The entropy of each position's distribution, logits / temperature."""
    logits = logits.float() / temperature
    logps = torch.log_softmax(logits, dim=-1)
    return -(logps.exp() * logps).sum(-1)


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """An estimate of KL(π ‖ π_ref) at each sampled token (tokens drawn from π).

    k1 = log π − log π_ref: unbiased, can be negative per token (the RLHF penalty of Ziegler et al.);
    k2 = ½ (log π − log π_ref)²; k3 = r − 1 − log r with r = π_ref / π: unbiased and never negative.
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1, k2 or k3")


# ---- responses and rewards ----

def response_mask(response_ids: torch.Tensor, eos_token_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, ended): mask is 1 up to and including each row's first end-of-sequence token, 0 after it;
    ended says which rows produced one (the others were truncated at the length limit)."""
    is_eos = torch.zeros_like(response_ids, dtype=torch.bool)
    for token_id in eos_token_ids:
        is_eos |= response_ids == token_id
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # eos tokens strictly before each position
    return (eos_before == 0).long(), is_eos.any(dim=1)


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last valid token (0 for an empty row)."""
    return (mask.sum(dim=1) - 1).clamp(min=0)


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """The per-token RLHF reward: −kl_coef × KL on every response token, plus the sequence's score on its
    last valid token (the end-of-sequence token, or the last one generated when it was truncated)."""
    rewards = -kl_coef * kl * mask.to(kl.dtype)
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    rewards[rows, last_index(mask)] += scores.to(rewards.dtype)
    return rewards


# ---- advantages ----

def compute_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over each row's valid prefix.

    δ_t = r_t + γ V_{t+1} − V_t and A_t = δ_t + γλ A_{t+1}, where the state after the last valid token is
    terminal (V = 0, A = 0): the episode ends at the end-of-sequence token or at the length limit.
    Returns (advantages, returns = advantages + values), both 0 on masked positions.
    """
    mask = mask.to(values.dtype)
    steps = rewards.shape[1]
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(steps)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = (delta + gamma * lam * next_advantage) * mask[:, t]
        advantages[:, t] = advantage
        next_value, next_advantage = values[:, t] * mask[:, t], advantage
    returns = (advantages + values) * mask
    return advantages, returns


# ---- losses ----

def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cliprange: float) -> tuple[torch.Tensor, dict]:
    """PPO's clipped surrogate: mean over tokens of max(−A·ρ, −A·clip(ρ, 1−ε, 1+ε)), ρ = π / π_old.

    Stats: clipfrac (share of tokens where the clipped term was the larger), approxkl (½ E[(log ρ)²], an
    estimate of KL(π_old ‖ π)) and the mean ratio.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((clipped > unclipped).float(), mask),
                 "approxkl": 0.5 * masked_mean(log_ratio ** 2, mask),
                 "ratio": masked_mean(ratio, mask)}
    return loss, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               cliprange_value: float) -> tuple[torch.Tensor, dict]:
    """The clipped value loss: ½ mean over tokens of max((V − R)², (V_clip − R)²), where V_clip stays within
    ±cliprange_value of the rollout's value. Stats: clipfrac (share of tokens where the clipped term won)."""
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped_loss = (values - returns) ** 2
    clipped_loss = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped_loss, clipped_loss), mask)
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), mask)}
    return loss, stats


# ---- the KL coefficient ----

class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, value: float):
        self.value = value

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """Ziegler et al. 2019 (section 2.2): β ← β (1 + K_β e), e = clip(KL / target − 1, −0.2, 0.2), with
    K_β = n_steps / horizon: β grows while the policy's KL from the reference is above the target and shrinks
    below it, by at most 20% × (samples seen / horizon) per update."""

    def __init__(self, value: float, target: float, horizon: int):
        self.value, self.target, self.horizon = value, target, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

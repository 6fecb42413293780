"""PPO's arithmetic (backend/ppo/core.py) against straightforward reference computations in plain Python."""
import math

import pytest
import torch

from backend.ppo import core

# Three responses of lengths 4, 2 and 5 in a batch padded to 5 tokens
LENGTHS = [4, 2, 5]
MASK = torch.tensor([[1 if t < n else 0 for t in range(5)] for n in LENGTHS])
REWARDS = torch.tensor([[0.1, -0.2, 0.0, 1.5, 9.0],
                        [0.3, 2.0, 7.0, 7.0, 7.0],
                        [-0.1, 0.0, 0.2, -0.3, 0.8]])
VALUES = torch.tensor([[0.5, 0.4, 0.9, 1.1, 5.0],
                       [-0.2, 0.7, 3.0, 3.0, 3.0],
                       [0.0, 0.1, -0.4, 0.2, 0.3]])  # padding holds junk on purpose: it must not leak in


def reference_gae(rewards, values, length, gamma, lam):
    """GAE for one response, the textbook way: the state after its last token is terminal."""
    advantages = [0.0] * length
    running = 0.0
    for t in reversed(range(length)):
        next_value = values[t + 1] if t + 1 < length else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages, [a + v for a, v in zip(advantages, values[:length])]


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0), (0.99, 0.0)])
def test_gae_and_returns_match_the_loop_over_each_response_up_to_its_length(gamma, lam):
    advantages, returns = core.compute_gae(REWARDS, VALUES, MASK, gamma, lam)
    for row, n in enumerate(LENGTHS):
        want_adv, want_ret = reference_gae(REWARDS[row].tolist(), VALUES[row].tolist(), n, gamma, lam)
        assert advantages[row, :n].tolist() == pytest.approx(want_adv, abs=1e-6)
        assert returns[row, :n].tolist() == pytest.approx(want_ret, abs=1e-6)
        assert advantages[row, n:].abs().sum() == 0 and returns[row, n:].abs().sum() == 0


def test_gae_with_lambda_one_and_no_discount_is_reward_to_go_minus_value():
    advantages, returns = core.compute_gae(REWARDS, VALUES, MASK, 1.0, 1.0)
    for row, n in enumerate(LENGTHS):
        to_go = [sum(REWARDS[row, t:n].tolist()) for t in range(n)]
        assert returns[row, :n].tolist() == pytest.approx(to_go, abs=1e-6)


def masked_values(x, mask):
    return [v for v, m in zip(x.flatten().tolist(), mask.flatten().tolist()) if m]


def test_masked_mean_and_variance_ignore_padding():
    kept = masked_values(REWARDS, MASK)
    mean = sum(kept) / len(kept)
    var = sum((v - mean) ** 2 for v in kept) / (len(kept) - 1)
    assert core.masked_mean(REWARDS, MASK).item() == pytest.approx(mean)
    assert core.masked_var(REWARDS, MASK).item() == pytest.approx(var)
    assert core.masked_var(REWARDS, MASK, unbiased=False).item() == pytest.approx(var * (len(kept) - 1) / len(kept))
    assert core.masked_mean(REWARDS, MASK, dim=1).tolist() == pytest.approx(
        [sum(REWARDS[r, :n].tolist()) / n for r, n in enumerate(LENGTHS)])


def test_whitening_gives_zero_mean_unit_variance_on_the_valid_tokens_and_zeros_elsewhere():
    white = core.masked_whiten(REWARDS, MASK)
    kept = masked_values(white, MASK)
    mean = sum(kept) / len(kept)
    assert mean == pytest.approx(0.0, abs=1e-6)
    assert sum((v - mean) ** 2 for v in kept) / (len(kept) - 1) == pytest.approx(1.0, abs=1e-5)
    assert (white * (1 - MASK)).abs().sum() == 0
    # without re-centring the mean is kept: a positive-on-average reward stays positive on average
    scaled = core.masked_whiten(REWARDS, MASK, shift_mean=False)
    original = masked_values(REWARDS, MASK)
    std = math.sqrt(sum((v - sum(original) / len(original)) ** 2 for v in original) / (len(original) - 1))
    assert masked_values(scaled, MASK) == pytest.approx(
        [(v - sum(original) / len(original)) / std + sum(original) / len(original) for v in original], abs=1e-5)


def test_the_response_ends_at_its_first_end_of_sequence_token():
    eos, pad = 2, 2  # SmolLM2: pad is eos
    responses = torch.tensor([[5, 6, eos, pad, pad],  # ended on the third token
                              [eos, pad, pad, pad, pad],  # ended at once: the eos is still an action
                              [5, 6, 7, 8, 9],  # truncated at the length limit
                              [5, 0, 7, 0, 9]])  # a second eos id (0) counts too
    mask, ended = core.response_mask(responses, [eos, 0])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert ended.tolist() == [True, True, False, True]


def test_the_score_lands_on_the_last_valid_token_and_the_kl_penalty_on_every_valid_token():
    kl = torch.tensor([[0.5, -0.5, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    kl = kl * MASK
    rewards = core.token_rewards(torch.tensor([1.0, -1.0, 0.5]), kl, MASK, kl_coef=0.1)
    assert rewards[0].tolist() == pytest.approx([-0.05, 0.05, -0.1, -0.2 + 1.0, 0.0])
    assert rewards[1].tolist() == pytest.approx([-0.1, -0.1 - 1.0, 0.0, 0.0, 0.0])
    assert rewards[2].tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.5])


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -0.5])
    assert core.kl_per_token(logp, ref, "k1").tolist() == pytest.approx([0.5, -1.0, 0.0])
    assert core.kl_per_token(logp, ref, "k2").tolist() == pytest.approx([0.125, 0.5, 0.0])
    k3 = core.kl_per_token(logp, ref, "k3")
    assert k3.tolist() == pytest.approx([math.exp(-0.5) - 1 + 0.5, math.exp(1.0) - 1 - 1.0, 0.0])
    assert (k3 >= 0).all()
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        core.kl_per_token(logp, ref, "k4")


def test_the_clipped_policy_loss_on_known_values():
    # four tokens: ratio inside the range, above it with a positive advantage (clipped), below it with a
    # negative advantage (clipped), above it with a negative advantage (not clipped: pessimistic bound)
    ratios = torch.tensor([[1.1, 1.5, 0.5, 1.5]])
    advantages = torch.tensor([[1.0, 2.0, -1.0, -1.0]])
    old = torch.zeros(1, 4)
    mask = torch.ones(1, 4)
    loss, stats = core.policy_loss(torch.log(ratios), old, advantages, mask, cliprange=0.2)
    per_token = [-1.0 * 1.1, -2.0 * 1.2, 1.0 * 0.8, 1.0 * 1.5]
    assert loss.item() == pytest.approx(sum(per_token) / 4)
    assert stats["clipfrac"].item() == pytest.approx(2 / 4)
    assert stats["approxkl"].item() == pytest.approx(0.5 * sum(math.log(r) ** 2 for r in [1.1, 1.5, 0.5, 1.5]) / 4)
    # a masked token changes nothing
    loss_masked, _ = core.policy_loss(torch.log(ratios), old, advantages, torch.tensor([[1, 1, 1, 0]]), 0.2)
    assert loss_masked.item() == pytest.approx(sum(per_token[:3]) / 3)


def test_the_policy_gradient_vanishes_where_the_ratio_is_clipped():
    log_ratio = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    loss, _ = core.policy_loss(log_ratio, torch.zeros(1, 2), torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), 0.2)
    loss.backward()
    assert log_ratio.grad[0, 0] == 0 and log_ratio.grad[0, 1] != 0


def test_the_clipped_value_loss_on_known_values():
    old = torch.tensor([[1.0, 1.0, 1.0]])
    new = torch.tensor([[1.1, 2.0, 0.0]])
    returns = torch.tensor([[1.5, 1.0, 0.5]])
    loss, stats = core.value_loss(new, old, returns, torch.ones(1, 3), cliprange_value=0.2)
    # clipped predictions: 1.1, 1.2, 0.8
    per_token = [max((1.1 - 1.5) ** 2, (1.1 - 1.5) ** 2), max((2.0 - 1.0) ** 2, (1.2 - 1.0) ** 2),
                 max((0.0 - 0.5) ** 2, (0.8 - 0.5) ** 2)]
    assert loss.item() == pytest.approx(0.5 * sum(per_token) / 3)
    assert stats["clipfrac"].item() == pytest.approx(0.0)
    # jumping onto the return in one update, beyond the clip range: the clipped term (still 0.8 short) counts
    new = torch.tensor([[2.0]], requires_grad=True)
    loss, stats = core.value_loss(new, torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.ones(1, 1), 0.2)
    assert loss.item() == pytest.approx(0.5 * (1.2 - 2.0) ** 2) and stats["clipfrac"].item() == 1.0
    loss.backward()
    assert new.grad.item() == 0  # no push further out of the trust region


def test_log_probabilities_and_entropy_use_the_sampling_temperature():
    logits = torch.tensor([[[2.0, 0.0, -1.0]]])
    tokens = torch.tensor([[0]])
    for temperature in (1.0, 0.5):
        scaled = [v / temperature for v in (2.0, 0.0, -1.0)]
        log_z = math.log(sum(math.exp(v) for v in scaled))
        assert core.token_logprobs(logits, tokens, temperature).item() == pytest.approx(scaled[0] - log_z)
        probs = [math.exp(v - log_z) for v in scaled]
        assert core.entropy_from_logits(logits, temperature).item() == pytest.approx(
            -sum(p * math.log(p) for p in probs))


def test_the_adaptive_kl_coefficient_moves_towards_the_target_and_the_fixed_one_stays():
    ctl = core.AdaptiveKLController(0.1, target=6.0, horizon=10_000)
    ctl.update(current_kl=12.0, n_steps=1000)  # far above: error clipped to +0.2
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 1000 / 10_000))
    ctl = core.AdaptiveKLController(0.1, target=6.0, horizon=10_000)
    ctl.update(current_kl=5.4, n_steps=1000)  # 10% below
    assert ctl.value == pytest.approx(0.1 * (1 - 0.1 * 1000 / 10_000))
    fixed = core.FixedKLController(0.05)
    fixed.update(100.0, 1000)
    assert fixed.value == 0.05

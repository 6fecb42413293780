"""Simple preference optimisation (SimPO): CPO's trainer with loss_type "simpo".

The reward of an answer is its average log-probability per token times beta (no reference model, no length bias),
and the chosen answer must beat the rejected one by the margin gamma. The simpo section keeps SimPO's own defaults
(beta 2, gamma 1, no SFT term); cpo_alpha above 0 adds CPO's SFT term (CPO-SimPO).
"""
from backend.modes import cpo
from backend.modes.training import TrainContext


def build_trainer(ctx: TrainContext):
    return cpo.build_trainer(ctx, loss_type="simpo")

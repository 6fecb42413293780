"""On-policy distillation: TRL's experimental GKDTrainer distils a frozen teacher into the trained model.

The loss is the generalised Jensen-Shannon divergence (gkd.beta) between the student's and the teacher's
next-token distributions over an answer's tokens: the dataset's answer, or on a share gkd.lmbda of the steps an
answer the student samples itself (on-policy, the GKD paper's point: the student learns where its own answers go
wrong), or with gkd.seq_kd one the teacher samples. The teacher (gkd.teacher: any model reference, `run:<id>`
merged once) is loaded here in the student's dtype, frozen; it must share the student's vocabulary, which
GKDTrainer checks (and preflight before it, from the two config.json files).

Data: SFT's messages or prompt / completion rows. TRL's ChatML collator reads a `messages` column (the last
turn is the answer), so prompt / completion rows are turned into messages here.
"""
from trl.experimental.gkd import GKDTrainer

from backend.models import load_causal_lm
from backend.modes.training import TrainContext, lora_config, model_dtype, model_kwargs, trainer_args


class _GKDTrainer(GKDTrainer):
    """GKDTrainer logging `on_policy`: the share of the logged steps that trained on the student's own samples
    (GKDTrainer itself logs the loss alone)."""

    def generate_on_policy_outputs(self, model, inputs, generation_config):  # a staticmethod in TRL, called on self
        if model is not self.accelerator.unwrap_model(self.teacher_model):
            self._sampled = True
        return GKDTrainer.generate_on_policy_outputs(model, inputs, generation_config)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._sampled = False
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._metrics["train"]["on_policy"].append(float(self._sampled))
        return loss


def as_messages(ds):
    """Prompt / completion rows as the `messages` the ChatML collator reads (a plain prompt a user turn, a plain
    completion the assistant's); messages rows as they are."""
    if ds is None or "messages" in ds.column_names:
        return ds

    def turns(value, role):
        return list(value) if isinstance(value, list) else [{"role": role, "content": value}]

    return ds.map(lambda row: {"messages": turns(row["prompt"], "user") + turns(row["completion"], "assistant")},
                  remove_columns=["prompt", "completion"])


def build_trainer(ctx: TrainContext) -> GKDTrainer:
    from backend.models.from_run import training_model

    c = ctx.config
    args = trainer_args(ctx)
    tokenizer = ctx.tokenizer()
    model = load_causal_lm(ctx.model_path, **model_kwargs(c))
    said = (lambda f, m: print(f"[teacher {f:.0%}] {m}", flush=True)) if ctx.is_main else None
    teacher = load_causal_lm(training_model(c.teacher, ctx.store.workspace, said), dtype=model_dtype(c))
    teacher.requires_grad_(False)
    return _GKDTrainer(model=model, teacher_model=teacher, args=args, train_dataset=as_messages(ctx.dataset),
                       eval_dataset=as_messages(ctx.eval_dataset), processing_class=tokenizer,
                       peft_config=lora_config(c))

"""The reward probe: before a run spends a step, sample one group of completions for a few of its prompts with
the run's own generation settings, score them with its reward sources, and say what would keep it from learning
(every completion cut at the length limit, a source that scores everything the same, groups without reward
spread, one source deciding the total alone).

Runs inside the worker on the model it has loaded (the run's first phase), from the Train tab's "Check rewards"
and from `launch.py train --dry-run`. Findings are diagnoses (texts.py words them in both languages).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from backend.doctor.checks import THRESHOLDS, Diagnosis, longer_completions, more_generations

MAX_SEQUENCES = 16  # completions one probe samples at most (its time stays bounded on a CPU)
MAX_PROMPTS = 4
REFERENCE_ROWS = 64  # reference answers whose token lengths are measured


@dataclass
class ProbeReport:
    prompts: int
    per_prompt: int
    max_tokens: int
    lengths: list[int]  # each completion's tokens
    clipped: int  # completions cut at max_tokens
    reference: tuple[str, int, int] | None  # (column, fewest, most tokens) of the reference answers
    scores: dict[str, list]  # source -> score per completion (cost sources left out)
    totals: list[float]
    groups: list[int]  # the prompt each completion answers
    seconds: float
    examples: list[tuple[str, str, float]] = field(default_factory=list)  # (prompt, completion, total)
    unfinished: int = 0  # completions the time limit left unwritten, in none of the above
    diagnoses: list[Diagnosis] = field(default_factory=list)

    @property
    def no_signal(self) -> bool:
        """The run cannot learn as set (rl.probe: stop ends it)."""
        return any(d.no_signal for d in self.diagnoses)

    @property
    def flat(self) -> bool:
        """No probe group had any reward spread."""
        return any(d.check == "probe_zero_variance" for d in self.diagnoses)

    def summary(self) -> str:
        parts = [f"{name} mean {statistics.fmean(v) if v else 0:.3g}" for name, v in
                 ((n, [x for x in s if x is not None]) for n, s in self.scores.items())]
        return (f"reward probe: {self.prompts} prompt(s) × {self.per_prompt} completion(s) in {self.seconds:.1f} s; "
                f"{'; '.join(parts)}; {self.clipped}/{len(self.lengths)} cut at {self.max_tokens} tokens"
                + (f"; {self.unfinished} unfinished when its time ran out" if self.unfinished else ""))


def not_probed(config) -> str | None:
    """Why the probe does not judge this run, or None: it samples single answers, and a run with tools answers
    through calls and their results (judged without them, every answer would look wrong), an environment's
    episodes through its state."""
    if config.tools or config.environment:
        what = "plays an environment" if config.environment else "calls tools"
        return f"the run {what}, and the probe samples answers without it; its first steps' diagnoses say what it " \
               "finds instead"
    return None


def probe_size(config, before_start: bool = True) -> tuple[int, int]:
    """(prompts, completions per prompt): one group per prompt, at most MAX_SEQUENCES completions. Inside the
    run (before_start False) it samples what one step would (its batch): the probe costs the run's start one
    generation step (a look that finds no spread looks again, wider: run_probe)."""
    sampled = 2 if config.spec.judges_pairs else config.rl.num_generations  # Online DPO: a pair per prompt
    n = min(max(1, sampled), MAX_SEQUENCES)
    most = max(1, min(MAX_PROMPTS, MAX_SEQUENCES // n))
    if before_start:
        return most, n
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps
    return max(1, min(most, per_step // n)), n


def reference_lengths(config, dataset, tokenizer) -> tuple[str, int, int] | None:
    """Token lengths of the answers a source compares against (its `column`), from the first rows."""
    columns = [s.params.get("column") for s in config.reward_sources if isinstance(s.params.get("column"), str)]
    column = next((c for c in columns if c in dataset.column_names), None)
    if column is None:
        return None
    texts = [str(v) for v in dataset.select(range(min(REFERENCE_ROWS, len(dataset))))[column] if v is not None]
    if not texts:
        return None
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    return column, min(lengths), max(lengths)


def _generate(model, tokenizer, prompts: list, n: int, config,
              max_time: float | None = None) -> tuple[list[str], list[int], list[bool], list[bool]]:
    """n sampled completions per prompt, in one left-padded batch: (texts, token counts, cut at the limit, still
    unfinished when `max_time` seconds of generating ran out)."""
    import torch

    from backend.models.shared_prefill import generate_sharing_prompts
    from backend.rewards.base import is_conversation

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if is_conversation(p)
             else str(p) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        chat = any(is_conversation(p) for p in prompts)
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat)
    finally:
        tokenizer.padding_side = side
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    rl, limit = config.rl, config.rl.max_completion_length
    eos = model.generation_config.eos_token_id if getattr(model, "generation_config", None) else None
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else []) | {tokenizer.eos_token_id}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = generate_sharing_prompts(model.generate, model, **inputs, max_new_tokens=limit, do_sample=True,
                                           temperature=rl.temperature, top_p=rl.top_p, num_return_sequences=n,
                                           pad_token_id=tokenizer.pad_token_id,
                                           **({"max_time": max_time} if max_time else {}))
    finally:
        model.train(was_training)
    start = inputs["input_ids"].shape[1]
    out, lengths, cut, unfinished = [], [], [], []
    for row in ids[:, start:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos), None)
        lengths.append(end or len(row))
        cut.append(end is None and len(row) >= limit)
        unfinished.append(end is None and len(row) < limit)  # only where max_time stopped the batch
        out.append(tokenizer.decode(row[:end], skip_special_tokens=True).strip())
    return out, lengths, cut, unfinished


def run_probe(model, tokenizer, config, dataset, workspace, before_start: bool = True) -> ProbeReport:
    """Sample, score and diagnose (see the module's text). `dataset`: the run's prepared training rows. Inside the
    run a first look at one step's prompts that finds the run cannot learn looks again at as many other prompts
    as a probe before Start reads, so that a run is stopped on more than one step's groups."""
    k, n = probe_size(config, before_start)
    report = _probe_rows(model, tokenizer, config, dataset, workspace, range(min(k, len(dataset))), n, before_start)
    most, _ = probe_size(config, before_start=True)
    if report.no_signal and not before_start and k < most and len(dataset) > k:  # confirmed before it stops a run
        first = report
        report = _probe_rows(model, tokenizer, config, dataset, workspace, range(k, min(k + most, len(dataset))), n)
        report.seconds += first.seconds
        for d in report.diagnoses:
            if d.check == "probe_zero_variance":  # both looks count
                d.params["groups"] += len(set(first.groups))
    return report


def _probe_rows(model, tokenizer, config, dataset, workspace, indices: range, n: int,
                before_start: bool = False) -> ProbeReport:
    from backend.playground import PromptRow, score

    t0 = time.monotonic()
    rows = dataset.select(indices)
    prompts = [PromptRow(i + 1, r["prompt"], {c: v for c, v in r.items() if c != "prompt"})
               for i, r in zip(indices, rows)]
    completions, lengths, cut, unfinished = _generate(model, tokenizer, [p.prompt for p in prompts], n, config,
                                                      max_time=THRESHOLDS["probe_seconds"] if before_start else None)
    # what the time limit left unwritten is judged nowhere: a half-written answer would score as a wrong one
    kept = [i for i, u in enumerate(unfinished) if not u]
    groups = [i // n for i in kept]
    limit = config.rl.max_completion_length
    slow = None
    if len(kept) < len(completions):
        slow = Diagnosis("probe_slow", "warning", {"unfinished": len(completions) - len(kept), "n": len(completions),
                                                   "seconds": THRESHOLDS["probe_seconds"], "tokens": max(lengths),
                                                   "current": limit},
                         {"metric": "probe", "lengths": lengths}, {"rl.max_completion_length": max(32, limit // 2)})
    scores, totals, examples, stats = {}, [], [], []
    if kept:
        result = score(config.reward_sources, prompts, [completions[i] for i in kept], workspace, groups=groups)
        scores = {s.name: s.scores for s in result.stats if s.budget is None}
        totals, stats = [r.total for r in result.rows], result.stats
        examples = [(r.prompt, r.completion, r.total) for r in result.rows[:4]]
    report = ProbeReport(len(prompts), n, limit, [lengths[i] for i in kept], sum(cut[i] for i in kept),
                         reference_lengths(config, dataset, tokenizer), scores, totals, groups,
                         time.monotonic() - t0, examples, unfinished=len(completions) - len(kept))
    report.diagnoses = (findings(report, config, stats) if kept else []) + ([slow] if slow else [])
    return report


def findings(report: ProbeReport, config, stats) -> list[Diagnosis]:
    """What the probe's numbers mean, the most serious first."""
    out, n = [], len(report.lengths)
    current = config.rl.max_completion_length
    ref = report.reference
    truncated = n > 0 and report.clipped / n >= THRESHOLDS["probe_clipped"]
    if truncated:
        suggested = longer_completions(current, ref[2] if ref else None)
        out.append(Diagnosis("probe_truncation", "warning",
                             {"clipped": report.clipped, "n": n, "current": current, "suggested": suggested,
                              "column": ref[0] if ref else "", "ref_min": ref[1] if ref else 0,
                              "ref_max": ref[2] if ref else 0},
                             {"metric": "probe", "lengths": report.lengths},
                             {"rl.max_completion_length": suggested}))
    elif ref and ref[2] > current:
        suggested = longer_completions(current, ref[2])
        out.append(Diagnosis("probe_reference_longer", "warning",
                             {"current": current, "column": ref[0], "ref_min": ref[1], "ref_max": ref[2],
                              "suggested": suggested}, {"metric": "probe"}, {"rl.max_completion_length": suggested}))
    for s in stats:
        values = [v for v in s.scores if v is not None]
        if s.budget is None and len(s.scores) > 1 and values and max(values) - min(values) <= 1e-12:
            out.append(Diagnosis("probe_constant", "warning", {"n": n, "source": s.name, "value": values[0],
                                                               "truncated": truncated}, {"metric": "probe"}))
    if config.spec.groups_completions and report.per_prompt > 1:
        by_group: dict[int, list[float]] = {}
        for g, t in zip(report.groups, report.totals):
            by_group.setdefault(g, []).append(t)
        by_group = {g: v for g, v in by_group.items() if len(v) > 1}  # a lone finished answer has no spread to show
        zero = sum(1 for v in by_group.values() if max(v) - min(v) <= 1e-12)
        if by_group and zero == len(by_group):
            fix = {"rl.max_completion_length": longer_completions(current, ref[2] if ref else None)} if truncated \
                else more_generations(config)
            # no spread in a sample may be a sparse reward's bad luck; it is the run's fate when every completion
            # scored the same because none could end, or because a source pays the same for anything
            same = max(report.totals) - min(report.totals) <= 1e-12
            constant_paid = any(d.check == "probe_constant" and d.params["value"] != 0 for d in out)
            proven = same and (report.clipped == n or constant_paid) and not report.unfinished
            out.insert(0, Diagnosis("probe_zero_variance", "error" if proven else "warning",
                                    {"groups": len(by_group), "num_generations": config.rl.num_generations,
                                     "suggested": fix.get("rl.num_generations", fix.get("rl.max_completion_length")),
                                     "truncated": truncated, "stopped": proven and config.rl.probe == "stop",
                                     "sparse": not proven},
                                    {"metric": "probe", "totals": report.totals}, fix, no_signal=proven))
        elif by_group and zero >= THRESHOLDS["probe_some_zero"] * len(by_group):
            out.append(Diagnosis("probe_some_zero_variance", "warning", {"zero": zero, "groups": len(by_group)},
                                 {"metric": "probe"}, more_generations(config)))
    spread = {s.name: abs(s.weight) * s.std for s in stats if s.budget is None and s.std and s.weight}
    if len(spread) >= 2:
        variance = {k: v * v for k, v in spread.items()}
        name, top = max(variance.items(), key=lambda kv: kv[1])
        share = top / sum(variance.values())
        if share >= THRESHOLDS["probe_dominant"]:
            out.append(Diagnosis("probe_dominant", "warning", {"source": name, "share": share}, {"metric": "probe"}))
    return out


def check_rewards(config, workspace, loaded=None) -> ProbeReport:
    """The probe before a start (the Train tab's "Check rewards", `launch.py train --dry-run`): the run's dataset
    prepared as the worker would, its model loaded (or `loaded`: a (model, tokenizer) pair to use). The config
    must have passed preflight."""
    from backend.data import DataOptions, prepare_dataset

    if not config.spec.online_rl:
        raise ValueError(f"{config.mode} samples no completions: the reward probe is for "
                         "the RL modes")
    if why := not_probed(config):
        raise ValueError(f"no reward probe: {why}")
    dataset, _ = prepare_dataset(config.dataset, config.mode, workspace=workspace, options=DataOptions.of(config))
    if loaded is None:
        from backend.data.templates import template_text
        from backend.models import load_causal_lm, load_tokenizer
        from backend.models.from_run import training_model

        path = training_model(config.model, workspace)
        loaded = (load_causal_lm(path), load_tokenizer(path, chat_template=template_text(config.data.chat_template)))
    model, tokenizer = loaded
    return run_probe(model, tokenizer, config, dataset, workspace)

"""Scoring answers: reward sources as in training, plus reference-text metrics (ROUGE-L, BLEU, chrF, math).

Every scorer returns one float or None per answer. A scorer that raises on a batch is retried row by row, and a
row it still cannot score gets None and its error, so one bad row never loses the others.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from backend.evals.spec import METRICS, EvalError, ScorerConfig, scorer_names
from backend.rewards.base import completion_text

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


@dataclass
class Scorer:
    name: str
    config: ScorerConfig
    score_batch: Callable[[list, list[str], dict], list]  # (prompts, answers, columns) -> scores
    binary: bool = False  # scores are 0/1: pass@k applies
    errors: dict[int, str] = field(default_factory=dict)
    func: Callable | None = None  # a reward source's function (a gated scorer reads its gate's scores)

    def __call__(self, prompts: list, answers: list[str], columns: dict) -> list:
        from backend.rewards.custom import RewardTimeout

        try:
            return [_finite(s) for s in self.score_batch(prompts, answers, columns)]
        except RewardTimeout as e:  # row by row would wait out the limit once per row
            raise EvalError(f"scorer {self.name}: {e}; the evaluation was stopped") from None
        except Exception:  # noqa: BLE001 - retried row by row below to find the rows at fault
            pass
        out = []
        for i in range(len(answers)):
            try:
                out.append(_finite(self.score_batch([prompts[i]], [answers[i]],
                                                    {k: [v[i]] for k, v in columns.items()})[0]))
            except Exception as e:  # noqa: BLE001 - a user's function or a model may raise anything
                self.errors[i] = f"{type(e).__name__}: {e}"[:300]
                out.append(None)
        return out


def _finite(x):
    if x is None:
        return None
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def _text(x) -> str:
    return completion_text(x) if not isinstance(x, str) else x


def reference_text(value) -> str:
    """A reference as text; GSM8K-style '… #### 72' answers give their final part."""
    text = _text(value)
    m = _GSM8K_FINAL.search(text)
    return m.group(1) if m else text


def _tokens_for_rouge(text: str) -> str:
    if _CJK.search(text):
        import jieba

        jieba.setLogLevel(60)
        return " ".join(t for t in jieba.cut(text) if t.strip())
    return text


def _rouge_l() -> Callable:
    from rouge_score import rouge_scorer, tokenizers

    class _Whitespace(tokenizers.Tokenizer):  # the default drops every non-ASCII character (all of Chinese)
        def tokenize(self, text):
            return text.lower().split()

    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Whitespace())

    def score(answer: str, reference: str) -> float:
        return scorer.score(_tokens_for_rouge(reference), _tokens_for_rouge(answer))["rougeL"].fmeasure
    return score


def _sacrebleu(kind: str) -> Callable:
    import sacrebleu

    def score(answer: str, reference: str) -> float:
        if kind == "bleu":
            tokenize = "zh" if _CJK.search(reference) else "13a"
            return sacrebleu.sentence_bleu(answer, [reference], tokenize=tokenize).score / 100
        return sacrebleu.sentence_chrf(answer, [reference]).score / 100
    return score


def _math() -> Callable:
    from math_verify import parse, verify

    def score(answer: str, reference: str) -> float:
        # math-verify's timeouts use signals, which only the main thread may set
        main = threading.current_thread() is threading.main_thread()
        parsing = {} if main else {"parsing_timeout": None}
        gold = parse(reference if "$" in reference or "\\" in reference else f"${reference}$", **parsing)
        if not gold:
            raise ValueError(f"the reference {reference[:60]!r} is not a mathematical answer")
        return float(verify(gold, parse(answer, **parsing), **({} if main else {"timeout_seconds": None})))
    return score


_METRIC_FACTORIES = {"rouge_l": _rouge_l, "bleu": lambda: _sacrebleu("bleu"), "chrf": lambda: _sacrebleu("chrf"),
                     "math": _math}


def _metric_scorer(config: ScorerConfig, name: str, column: str) -> Scorer:
    pair = _METRIC_FACTORIES[config.type]()

    def score_batch(prompts, answers, columns):
        return [pair(_text(a), reference_text(r)) for a, r in zip(answers, columns[column])]
    return Scorer(name, config, score_batch, binary=config.type == "math")


def _source_scorer(config: ScorerConfig, name: str, workspace: Path, gate=None) -> Scorer:
    from backend.rewards import build_reward_funcs

    func = build_reward_funcs([config.source().model_copy(update={"name": name, "when": ""})], workspace)[0]
    func.gate = gate  # the reward function of the scorer `when` names

    def score_batch(prompts, answers, columns):
        return func(prompts=prompts, completions=answers, completion_ids=None, trainer_state=None, **columns)
    return Scorer(name, config, score_batch, binary=config.type in ("exact_match", "numeric_match", "regex"),
                  func=func)


def _gate_problem(scorers: list[ScorerConfig], names: list[str], i: int) -> str | None:
    """Why scorer i's `when` names no earlier reward-source scorer, or None."""
    from backend.rewards.spec import gate_problem

    earlier = [n for n, c in zip(names[:i], scorers[:i]) if not c.is_metric]
    return gate_problem(scorers[i].when, earlier, "reward-source scorer")


def metric_column(config: ScorerConfig, reference_column: str) -> str:
    return config.column or reference_column


def check_scorers(scorers: list[ScorerConfig], columns: list[str], reference_column: str,
                  workspace: Path) -> list[str]:
    """Problems to fix before anything generates, one per scorer, naming it and the column."""
    from backend.rewards import validate_sources

    errors = []
    available = ", ".join(columns)
    names = scorer_names(scorers)
    for i, (config, name) in enumerate(zip(scorers, names)):
        where = f"scorers.{i} ({name})"
        if config.is_metric:
            column = metric_column(config, reference_column)
            if not column:
                errors.append(f"{where}: {config.type} compares with a reference, and the set has no reference "
                              f"column; name one (reference column, or column: on the scorer); columns: {available}")
            elif column not in columns:
                errors.append(f"{where}: the evaluation set has no column '{column}' (columns: {available})")
        else:
            if problem := _gate_problem(scorers, names, i):
                errors.append(f"{where}: {problem}")
            source = config.source().model_copy(update={"name": name, "when": ""})
            errors += [e.replace(f"reward_sources.0 ({name})", where, 1)
                       for e in validate_sources([source], columns, workspace)]
    return errors


def build_scorers(scorers: list[ScorerConfig], reference_column: str, workspace: Path) -> list[Scorer]:
    out = []
    names = scorer_names(scorers)
    for i, (config, name) in enumerate(zip(scorers, names)):
        try:
            if problem := _gate_problem(scorers, names, i):
                raise ValueError(problem)
            if config.is_metric:
                out.append(_metric_scorer(config, name, metric_column(config, reference_column)))
            else:
                gate = next((s.func for s in out if s.name == config.when), None) if config.when else None
                out.append(_source_scorer(config, name, workspace, gate))
        except ImportError as e:
            raise EvalError(f"scorer {name}: {METRICS.get(config.type, config.type)} needs a package that is not "
                            f"installed ({e.name}); run `bash scripts/setup.sh`") from None
        except ValueError as e:
            raise EvalError(f"scorer {name}: {e}") from None
    return out


def fused(scorers: list[Scorer], scores: dict[str, list]) -> list | None:
    """The judge of win rates: Σ weight × score of the reward sources (None counts 0, as in training); with no
    reward source, the first metric. None when there are no scorers."""
    sources = [s for s in scorers if not s.config.is_metric]
    if sources:
        n = len(scores[sources[0].name])
        return [sum(s.config.weight * (scores[s.name][i] or 0.0) for s in sources) for i in range(n)]
    return list(scores[scorers[0].name]) if scorers else None

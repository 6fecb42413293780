"""What each diagnosis says: (what is wrong, what to do), formatted from its params. The English is here, defined
once (`ENGLISH`, by key: `CHECK.what` / `CHECK.fix` and the fragments they are built from); the Chinese is in
locales/zh.yaml's `doctor` section, each entry with the hash of the English it translates (app/i18n.py checks them).
The UI shows them in the page's language, the CLI and the run log in English."""
from __future__ import annotations

from backend.core.locales import catalogue

LANGS = ("en", "zh")

ENGLISH: dict[str, str] = {
    "zero_variance.what": (
        "{share_pct} of prompt groups got the same reward for every completion: GRPO / RLOO learn nothing from a "
        "group without reward spread"),
    "zero_variance.fix": "{zero_fix}",
    "truncation.what": "{share_pct} of completions were cut at rl.max_completion_length={current} before they ended",
    "truncation.fix": "raise rl.max_completion_length to ≥ {suggested}",
    "reward_flat.what": "the reward stayed flat ({first:.3g} → {last:.3g}) over the run",
    "reward_flat.fix": (
        "check the reward sources in the Reward playground (do they tell good answers from bad?), or raise "
        "learning_rate from {lr:.2g} to {suggested:.2g}"),
    "reward_falling.what": "the reward fell over the run ({first:.3g} → {last:.3g})",
    "reward_falling.fix": "lower learning_rate from {lr:.2g} to {suggested:.2g}",
    "reward_hacking.what": (
        "the reward rose ({first:.3g} → {last:.3g}) while {hack_what}: the policy may be gaming the reward"),
    "reward_hacking.fix": "add a KL penalty: {setting} {beta:g} → {suggested:g}, or add a length / repetition cost",
    "kl_runaway.what": "the KL to the reference kept growing ({first:.3g} → {last:.3g}): the policy is drifting away",
    "kl_runaway.fix": "raise {setting} from {current:g} to {suggested:g}, or lower learning_rate",
    "entropy_collapse.what": (
        "the entropy collapsed ({first:.3g} → {last:.3g}): the policy writes the same thing every time"),
    "entropy_collapse.fix": (
        "raise rl.temperature from {temperature:g} to {suggested:g}, lower learning_rate, or raise {setting}"),
    "loss_nan.what": "{metric} became NaN / infinite at step {step} ({count} of {points} logged steps)",
    "loss_nan.fix": "lower learning_rate from {lr:.2g} to {suggested:.2g}",
    "loss_spike.what": (
        "the loss spiked to {value:.3g} at step {step} ({ratio:.0f}× the median {median:.3g} before it)"),
    "loss_spike.fix": "lower learning_rate from {lr:.2g} to {suggested:.2g}",
    "loss_rising.what": "the training loss rose over the run ({first:.3g} → {last:.3g}): it diverges",
    "loss_rising.fix": "lower learning_rate from {lr:.2g} to {suggested:.2g}",
    "grad_explosion.what": "the gradient norm exploded to {value:.3g} at step {step} (early median {early:.3g})",
    "grad_explosion.fix": "lower learning_rate from {lr:.2g} to {suggested:.2g} and keep max_grad_norm at 1",
    "grad_zero.what": "the gradient norm was 0 at every one of {points} logged steps: nothing was learned",
    "grad_zero.fix": "check the reward sources in the Reward playground, or the data (is anything left to train on?)",
    "warmup_never_ends.what": (
        "the learning-rate warm-up ({warmup} steps) lasts the whole run ({steps} steps): the peak rate is never "
        "reached"),
    "warmup_never_ends.fix": "set warmup_steps to {suggested} (about 10% of the run)",
    "overfitting.what": (
        "the evaluation loss rose from its best {best:.3g} (step {best_step}) to {last:.3g} (step {last_step}) "
        "while the training loss fell: over-fitting"),
    "overfitting.fix": "train for {suggested} steps (max_steps), or use the checkpoint nearest step {best_step}",
    "slowdown.what": "steps slowed down {factor:.1f}× (from {early:.2g} s to {recent:.2g} s each)",
    "slowdown.fix": "another process may be using the machine's cores or memory; check what else runs",
    "tools_unused.what": (
        "the policy calls its tools {calls:.2f} times per episode{never_text}: it has not learned to write a call "
        "the template reads back"),
    "tools_unused.fix": (
        "warm up with SFT on a few tool-calling demonstrations (presets/sft_calculator.yaml), then train on from "
        "that run (model: run:<its id>); a tool_used reward source makes the first calls pay"),
    "tool_failures.what": "{share_pct} of tool calls were answered with an error",
    "tool_failures.fix": (
        "read the tool results (←) in the run's samples: arguments the tool refuses, a tool that fails, or calls "
        "past their time limit (timeout_s, rl.environment_timeout_s); a tool_errors source with a negative weight "
        "makes failed calls cost"),
    "constraint_unmet.what": "the cost {source} stayed over its budget ({cost:.3g} > {budget:g})",
    "constraint_unmet.fix": "{constraint_fix}",
    "probe_truncation.what": (
        "{clipped}/{n} probe completions were cut at rl.max_completion_length={current}{ref_text}"),
    "probe_truncation.fix": "raise rl.max_completion_length to ≥ {suggested}",
    "probe_reference_longer.what": (
        "the reference answers in `{column}` are {ref_min}-{ref_max} tokens, longer than "
        "rl.max_completion_length={current}"),
    "probe_reference_longer.fix": "raise rl.max_completion_length to ≥ {suggested}",
    "probe_constant.what": "all {n} probe completions scored {value:g} on `{source}`",
    "probe_constant.fix": "{constant_fix}",
    "probe_zero_variance.what": (
        "every one of the {groups} probe groups has zero reward variance: GRPO / RLOO get no signal{stop_text}"),
    "probe_zero_variance.fix": "{zero_fix}",
    "probe_some_zero_variance.what": "{zero} of {groups} probe groups have zero reward variance: they teach nothing",
    "probe_some_zero_variance.fix": "raise rl.num_generations, or make the reward graded (partial credit)",
    "probe_slow.what": (
        "{unfinished} of {n} probe completions were still being written after {seconds:g} s (at {tokens} of "
        "rl.max_completion_length={current} tokens): they are not judged, and a training step generates as long"),
    "probe_slow.fix": "lower rl.max_completion_length, or check again when the machine is less busy",
    "probe_dominant.what": "`{source}` dominates the fused reward ({share_pct} of its variance)",
    "probe_dominant.fix": "lower its weight, or raise the other sources'",
    "stalled.what": "the worker is stalled: {why}",
    "stalled.fix": "stop the run and resume it from its last checkpoint, or set stall_action to restart",
    "zero_fix.truncated": (
        "completions are cut before they can score: raise rl.max_completion_length to ≥ {suggested}"),
    "zero_fix.spread": (
        "raise rl.num_generations from {num_generations} to {suggested}, or make the reward graded (partial credit)"),
    "hack_what.held_out": "the held-out reward fell ({held_first:.3g} → {held_last:.3g})",
    "hack_what.length": "the completions grew {length_first:.0f} → {length_last:.0f} tokens",
    "constraint_fix.at_cap": "λ is at its cap {cap:g}: raise constraint.lambda_max",
    "constraint_fix.slow": "raise constraint.lambda_lr so λ reacts faster",
    "stop_text": "; the run stopped before its first step (rl.probe: warn trains anyway)",
    "sparse_text": (
        " from these (a sparse reward may still be earned later: the run trains on, and the doctor watches its "
        "groups)"),
    "ref_text": " (reference answers in `{column}` are {ref_min}-{ref_max} tokens)",
    "constant_fix.truncated": "the completions are cut before they can earn it: see the length limit above",
    "constant_fix.other": (
        "try `{source}` in the Reward playground on good and bad answers: it should tell them apart"),
    "never_text": " (never at any step)",
    "severity.error": "cannot learn",
    "severity.warning": "warning",
    "no_signal": "no learning signal",
    "stalled_word": "stalled",
    "suggestion.completion_length": (
        "suggested: rl.max_completion_length ≥ {value} (now {current}; the reference answers in `{column}` are "
        "{ref_min}-{ref_max} tokens, and answers that reason first run longer)"),
    "suggestion.num_generations": (
        "suggested: rl.num_generations {value} (now {current}; more completions per prompt give groups more reward "
        "spread, and the batch holds them)"),
    "suggestion.max_length": (
        "suggested: max_length {value} (now {current}; {cut} of the first {rows} rows are longer and would be cut, "
        "the longest has {longest} tokens)"),
}
# the checks that have words: every key CHECK.what
DESCRIBED = tuple(key.removesuffix(".what") for key in ENGLISH if key.endswith(".what"))


def word(key: str, lang: str = "en") -> str:
    """`key`'s words in `lang`: its Chinese from the catalogue, else its English."""
    entry = catalogue("zh").get("doctor", {}).get(key) if lang == "zh" else None
    return entry["text"] if entry else ENGLISH[key]


def describe(check: str, params: dict, lang: str = "en") -> tuple[str, str]:
    """(what is wrong, what to do) for a diagnosis, in `lang` (English when unknown)."""
    lang = lang if lang in LANGS else "en"
    p = {"setting": "rl.beta", **params}  # diagnoses stored before the KL setting was named per mode
    if "share" in p:
        p["share_pct"] = f"{100 * p['share']:.0f}%"
    w = lambda key: word(key, lang)  # noqa: E731
    try:
        if check in ("zero_variance", "probe_zero_variance"):
            p["zero_fix"] = w("zero_fix." + ("truncated" if p.get("truncated") else "spread")).format(**p)
            p["stop_text"] = w("stop_text") if p.get("stopped") else w("sparse_text") if p.get("sparse") else ""
        if check == "probe_truncation":
            p["ref_text"] = w("ref_text").format(**p) if p.get("column") else ""
        if check == "probe_constant":
            p["constant_fix"] = w("constant_fix." + ("truncated" if p.get("truncated") else "other")).format(**p)
        if check == "reward_hacking":
            p["hack_what"] = w("hack_what." + p.get("why", "length")).format(**p)
        if check == "loss_spike":
            p["ratio"] = p["value"] / p["median"] if p.get("median") else 0.0
        if check == "tools_unused":
            p["never_text"] = w("never_text") if p.get("never") else ""
        if check == "constraint_unmet":
            p["constraint_fix"] = w("constraint_fix." + ("at_cap" if p.get("at_cap") else "slow")).format(**p)
        if check not in DESCRIBED:
            return check, ""
        return w(f"{check}.what").format(**p), w(f"{check}.fix").format(**p)
    except (KeyError, ValueError, IndexError):  # a diagnosis stored by another version: its name at least
        return check, ""


def severity(kind: str, lang: str = "en") -> str:
    """"cannot learn" / "warning" (a diagnosis' severity, `error` / `warning`), in `lang`."""
    return word(f"severity.{kind}", lang) if f"severity.{kind}" in ENGLISH else kind


def suggestion_text(key: str, value, params: dict, lang: str = "en") -> str:
    return word(f"suggestion.{key}", lang).format(value=value, **params)

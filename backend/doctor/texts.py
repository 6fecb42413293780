"""What each diagnosis says, in English and Chinese: (what is wrong, what to do), formatted from its params.
The UI shows them in the page's language, the CLI and the run log in English."""
from __future__ import annotations

LANGS = ("en", "zh")

TEXTS: dict[str, dict[str, tuple[str, str]]] = {
    "zero_variance": {
        "en": ("{share_pct} of prompt groups got the same reward for every completion: GRPO / RLOO learn nothing "
               "from a group without reward spread",
               "{zero_fix}"),
        "zh": ("{share_pct} 的提示组中每个回答的奖励都相同：GRPO / RLOO 无法从没有奖励差异的组中学习",
               "{zero_fix}"),
    },
    "truncation": {
        "en": ("{share_pct} of completions were cut at rl.max_completion_length={current} before they ended",
               "raise rl.max_completion_length to ≥ {suggested}"),
        "zh": ("{share_pct} 的回答在 rl.max_completion_length={current} 处被截断，没有写完",
               "将 rl.max_completion_length 提高到 ≥ {suggested}"),
    },
    "reward_flat": {
        "en": ("the reward stayed flat ({first:.3g} → {last:.3g}) over the run",
               "check the reward sources in the Reward playground (do they tell good answers from bad?), or raise "
               "learning_rate from {lr:.2g} to {suggested:.2g}"),
        "zh": ("整个训练中奖励几乎不变（{first:.3g} → {last:.3g}）",
               "在奖励试验场检查奖励来源（能否区分好坏回答？），或将 learning_rate 从 {lr:.2g} 提高到 {suggested:.2g}"),
    },
    "reward_falling": {
        "en": ("the reward fell over the run ({first:.3g} → {last:.3g})",
               "lower learning_rate from {lr:.2g} to {suggested:.2g}"),
        "zh": ("训练中奖励下降（{first:.3g} → {last:.3g}）", "将 learning_rate 从 {lr:.2g} 降到 {suggested:.2g}"),
    },
    "reward_hacking": {
        "en": ("the reward rose ({first:.3g} → {last:.3g}) while {hack_what}: the policy may be gaming the reward",
               "add a KL penalty: {setting} {beta:g} → {suggested:g}, or add a length / repetition cost"),
        "zh": ("奖励上升（{first:.3g} → {last:.3g}）的同时{hack_what}：策略可能在钻奖励的空子",
               "加入 KL 惩罚：{setting} {beta:g} → {suggested:g}，或加入长度 / 重复成本"),
    },
    "kl_runaway": {
        "en": ("the KL to the reference kept growing ({first:.3g} → {last:.3g}): the policy is drifting away",
               "raise {setting} from {current:g} to {suggested:g}, or lower learning_rate"),
        "zh": ("与参考模型的 KL 持续增大（{first:.3g} → {last:.3g}）：策略正在偏离",
               "将 {setting} 从 {current:g} 提高到 {suggested:g}，或降低 learning_rate"),
    },
    "entropy_collapse": {
        "en": ("the entropy collapsed ({first:.3g} → {last:.3g}): the policy writes the same thing every time",
               "raise rl.temperature from {temperature:g} to {suggested:g}, lower learning_rate, or raise {setting}"),
        "zh": ("熵崩塌（{first:.3g} → {last:.3g}）：策略每次都写同样的内容",
               "将 rl.temperature 从 {temperature:g} 提高到 {suggested:g}，降低 learning_rate，或提高 {setting}"),
    },
    "loss_nan": {
        "en": ("{metric} became NaN / infinite at step {step} ({count} of {points} logged steps)",
               "lower learning_rate from {lr:.2g} to {suggested:.2g}"),
        "zh": ("{metric} 在第 {step} 步变为 NaN / 无穷（{points} 个记录步中有 {count} 个）",
               "将 learning_rate 从 {lr:.2g} 降到 {suggested:.2g}"),
    },
    "loss_spike": {
        "en": ("the loss spiked to {value:.3g} at step {step} ({ratio:.0f}× the median {median:.3g} before it)",
               "lower learning_rate from {lr:.2g} to {suggested:.2g}"),
        "zh": ("损失在第 {step} 步突增到 {value:.3g}（之前中位数 {median:.3g} 的 {ratio:.0f} 倍）",
               "将 learning_rate 从 {lr:.2g} 降到 {suggested:.2g}"),
    },
    "loss_rising": {
        "en": ("the training loss rose over the run ({first:.3g} → {last:.3g}): it diverges",
               "lower learning_rate from {lr:.2g} to {suggested:.2g}"),
        "zh": ("训练损失在训练中上升（{first:.3g} → {last:.3g}）：正在发散", "将 learning_rate 从 {lr:.2g} 降到 {suggested:.2g}"),
    },
    "grad_explosion": {
        "en": ("the gradient norm exploded to {value:.3g} at step {step} (early median {early:.3g})",
               "lower learning_rate from {lr:.2g} to {suggested:.2g} and keep max_grad_norm at 1"),
        "zh": ("梯度范数在第 {step} 步爆炸到 {value:.3g}（早期中位数 {early:.3g}）",
               "将 learning_rate 从 {lr:.2g} 降到 {suggested:.2g}，并保持 max_grad_norm 为 1"),
    },
    "grad_zero": {
        "en": ("the gradient norm was 0 at every one of {points} logged steps: nothing was learned",
               "check the reward sources in the Reward playground, or the data (is anything left to train on?)"),
        "zh": ("全部 {points} 个记录步的梯度范数都是 0：什么也没有学到", "在奖励试验场检查奖励来源，或检查数据（是否还有可训练的内容？）"),
    },
    "warmup_never_ends": {
        "en": ("the learning-rate warm-up ({warmup} steps) lasts the whole run ({steps} steps): the peak rate is never "
               "reached", "set warmup_steps to {suggested} (about 10% of the run)"),
        "zh": ("学习率预热（{warmup} 步）覆盖了整个训练（{steps} 步）：从未达到峰值学习率",
               "将 warmup_steps 设为 {suggested}（约为训练的 10%）"),
    },
    "overfitting": {
        "en": ("the evaluation loss rose from its best {best:.3g} (step {best_step}) to {last:.3g} (step {last_step}) "
               "while the training loss fell: over-fitting",
               "train for {suggested} steps (max_steps), or use the checkpoint nearest step {best_step}"),
        "zh": ("评估损失从最佳的 {best:.3g}（第 {best_step} 步）升到 {last:.3g}（第 {last_step} 步），而训练损失在下降：过拟合",
               "训练 {suggested} 步（max_steps），或使用最接近第 {best_step} 步的检查点"),
    },
    "slowdown": {
        "en": ("steps slowed down {factor:.1f}× (from {early:.2g} s to {recent:.2g} s each)",
               "another process may be using the machine's cores or memory; check what else runs"),
        "zh": ("训练步变慢了 {factor:.1f} 倍（每步从 {early:.2g} 秒到 {recent:.2g} 秒）",
               "可能有其他进程占用了本机的核心或内存；请检查还在运行什么"),
    },
    "tools_unused": {
        "en": ("the policy calls its tools {calls:.2f} times per episode{never_text}: it has not learned to write a "
               "call the template reads back",
               "warm up with SFT on a few tool-calling demonstrations (presets/sft_calculator.yaml), then train on "
               "from that run (model: run:<its id>); a tool_used reward source makes the first calls pay"),
        "zh": ("策略每个回合调用工具 {calls:.2f} 次{never_text}：它还没学会写出模板能读回的调用",
               "先用几条工具调用示范做 SFT 预热（presets/sft_calculator.yaml），再从那个运行接着训练"
               "（model: run:<它的 id>）；tool_used 奖励来源让最初的调用有回报"),
    },
    "tool_failures": {
        "en": ("{share_pct} of tool calls were answered with an error",
               "read the tool results (←) in the run's samples: arguments the tool refuses, a tool that fails, or "
               "calls past their time limit (timeout_s, rl.environment_timeout_s); a tool_errors source with a "
               "negative weight makes failed calls cost"),
        "zh": ("{share_pct} 的工具调用返回了错误",
               "查看运行样本中的工具结果（←）：工具拒绝的参数、运行失败的工具，或超过时间上限的调用"
               "（timeout_s、rl.environment_timeout_s）；权重为负的 tool_errors 来源让失败的调用有代价"),
    },
    "constraint_unmet": {
        "en": ("the cost {source} stayed over its budget ({cost:.3g} > {budget:g})",
               "{constraint_fix}"),
        "zh": ("成本 {source} 一直高于预算（{cost:.3g} > {budget:g}）", "{constraint_fix}"),
    },
    "probe_truncation": {
        "en": ("{clipped}/{n} probe completions were cut at rl.max_completion_length={current}{ref_text}",
               "raise rl.max_completion_length to ≥ {suggested}"),
        "zh": ("{n} 个试探回答中有 {clipped} 个在 rl.max_completion_length={current} 处被截断{ref_text}",
               "将 rl.max_completion_length 提高到 ≥ {suggested}"),
    },
    "probe_reference_longer": {
        "en": ("the reference answers in `{column}` are {ref_min}-{ref_max} tokens, longer than "
               "rl.max_completion_length={current}", "raise rl.max_completion_length to ≥ {suggested}"),
        "zh": ("`{column}` 中的参考答案长 {ref_min}-{ref_max} 个 token，超过 rl.max_completion_length={current}",
               "将 rl.max_completion_length 提高到 ≥ {suggested}"),
    },
    "probe_constant": {
        "en": ("all {n} probe completions scored {value:g} on `{source}`",
               "{constant_fix}"),
        "zh": ("全部 {n} 个试探回答在 `{source}` 上都得了 {value:g} 分", "{constant_fix}"),
    },
    "probe_zero_variance": {
        "en": ("every one of the {groups} probe groups has zero reward variance: GRPO / RLOO get no signal{stop_text}",
               "{zero_fix}"),
        "zh": ("全部 {groups} 个试探组的奖励方差都为零：GRPO / RLOO 得不到学习信号{stop_text}", "{zero_fix}"),
    },
    "probe_some_zero_variance": {
        "en": ("{zero} of {groups} probe groups have zero reward variance: they teach nothing",
               "raise rl.num_generations, or make the reward graded (partial credit)"),
        "zh": ("{groups} 个试探组中有 {zero} 个奖励方差为零：它们什么也教不了",
               "提高 rl.num_generations，或使用分级奖励（部分得分）"),
    },
    "probe_slow": {
        "en": ("{unfinished} of {n} probe completions were still being written after {seconds:g} s (at {tokens} of "
               "rl.max_completion_length={current} tokens): they are not judged, and a training step generates as long",
               "lower rl.max_completion_length, or check again when the machine is less busy"),
        "zh": ("{n} 个探测回答中有 {unfinished} 个在 {seconds:g} 秒后仍未写完（已写 {tokens} 个词元，"
               "rl.max_completion_length={current}）：它们不参与评判，训练的每一步生成也会同样耗时",
               "降低 rl.max_completion_length，或在机器较空闲时再检查"),
    },
    "probe_dominant": {
        "en": ("`{source}` dominates the fused reward ({share_pct} of its variance)",
               "lower its weight, or raise the other sources'"),
        "zh": ("`{source}` 主导了融合奖励（占其方差的 {share_pct}）", "降低它的权重，或提高其他来源的权重"),
    },
    "stalled": {
        "en": ("the worker is stalled: {why}", "stop the run and resume it from its last checkpoint, or set "
                                               "stall_action to restart"),
        "zh": ("训练进程停滞：{why}", "停止此运行并从最后一个检查点恢复，或将 stall_action 设为 restart"),
    },
}

_ZERO_FIX = {
    "en": ("completions are cut before they can score: raise rl.max_completion_length to ≥ {suggested}",
           "raise rl.num_generations from {num_generations} to {suggested}, or make the reward graded (partial "
           "credit)"),
    "zh": ("回答在得分之前就被截断：将 rl.max_completion_length 提高到 ≥ {suggested}",
           "将 rl.num_generations 从 {num_generations} 提高到 {suggested}，或使用分级奖励（部分得分）"),
}
_HACK_WHAT = {
    "en": {"held_out": "the held-out reward fell ({held_first:.3g} → {held_last:.3g})",
           "length": "the completions grew {length_first:.0f} → {length_last:.0f} tokens"},
    "zh": {"held_out": "留出集奖励下降（{held_first:.3g} → {held_last:.3g}）",
           "length": "回答长度从 {length_first:.0f} 增长到 {length_last:.0f} 个 token"},
}
_CONSTRAINT_FIX = {
    "en": ("λ is at its cap {cap:g}: raise constraint.lambda_max", "raise constraint.lambda_lr so λ reacts faster"),
    "zh": ("λ 已达到上限 {cap:g}：提高 constraint.lambda_max", "提高 constraint.lambda_lr，让 λ 反应更快"),
}
_STOP_TEXT = {"en": "; the run stopped before its first step (rl.probe: warn trains anyway)",
              "zh": "；运行在第一步之前已停止（rl.probe 设为 warn 则照常训练）"}
_SPARSE_TEXT = {"en": " from these (a sparse reward may still be earned later: the run trains on, and the doctor "
                       "watches its groups)",
                "zh": "（稀疏奖励之后仍可能得到：运行继续训练，诊断会持续观察各组）"}
_REF_TEXT = {"en": " (reference answers in `{column}` are {ref_min}-{ref_max} tokens)",
             "zh": "（`{column}` 中的参考答案长 {ref_min}-{ref_max} 个 token）"}
_CONSTANT_FIX = {
    "en": ("the completions are cut before they can earn it: see the length limit above",
           "try `{source}` in the Reward playground on good and bad answers: it should tell them apart"),
    "zh": ("回答在得分之前就被截断：见上面的长度限制", "在奖励试验场用好坏回答试试 `{source}`：它应能区分两者"),
}
SEVERITY = {"en": {"error": "cannot learn", "warning": "warning"}, "zh": {"error": "无法学习", "warning": "警告"}}
NO_SIGNAL = {"en": "no learning signal", "zh": "没有学习信号"}
STALLED = {"en": "stalled", "zh": "停滞"}


def describe(check: str, params: dict, lang: str = "en") -> tuple[str, str]:
    """(what is wrong, what to do) for a diagnosis, in `lang` (English when unknown)."""
    lang = lang if lang in LANGS else "en"
    p = {"setting": "rl.beta", **params}  # diagnoses stored before the KL setting was named per mode
    if "share" in p:
        p["share_pct"] = f"{100 * p['share']:.0f}%"
    if check in ("zero_variance", "probe_zero_variance"):
        p["zero_fix"] = _ZERO_FIX[lang][0 if p.get("truncated") else 1].format(**p)
        p["stop_text"] = _STOP_TEXT[lang] if p.get("stopped") else _SPARSE_TEXT[lang] if p.get("sparse") else ""
    if check == "probe_truncation":
        p["ref_text"] = _REF_TEXT[lang].format(**p) if p.get("column") else ""
    if check == "probe_constant":
        p["constant_fix"] = _CONSTANT_FIX[lang][0 if p.get("truncated") else 1].format(**p)
    if check == "reward_hacking":
        p["hack_what"] = _HACK_WHAT[lang][p.get("why", "length")].format(**p)
    if check == "loss_spike":
        p["ratio"] = p["value"] / p["median"] if p.get("median") else 0.0
    if check == "tools_unused":
        p["never_text"] = {"en": " (never at any step)", "zh": "（每一步都没有调用）"}[lang] if p.get("never") else ""
    if check == "constraint_unmet":
        p["constraint_fix"] = _CONSTRAINT_FIX[lang][0 if p.get("at_cap") else 1].format(**p)
    what, action = TEXTS.get(check, {}).get(lang, (check, ""))
    try:
        return what.format(**p), action.format(**p)
    except (KeyError, ValueError, IndexError):  # a diagnosis stored by another version: its name at least
        return check, ""


SUGGESTIONS = {
    "completion_length": {
        "en": "suggested: rl.max_completion_length ≥ {value} (now {current}; the reference answers in `{column}` are "
              "{ref_min}-{ref_max} tokens, and answers that reason first run longer)",
        "zh": "建议：rl.max_completion_length ≥ {value}（现为 {current}；`{column}` 中的参考答案长 {ref_min}-{ref_max} 个 token，"
              "先推理再作答的回答会更长）",
    },
    "num_generations": {
        "en": "suggested: rl.num_generations {value} (now {current}; more completions per prompt give groups more "
              "reward spread, and the batch holds them)",
        "zh": "建议：rl.num_generations {value}（现为 {current}；每个提示更多的回答让组内奖励更有差异，批次也容得下）",
    },
    "max_length": {
        "en": "suggested: max_length {value} (now {current}; {cut} of the first {rows} rows are longer and would be cut, "
              "the longest has {longest} tokens)",
        "zh": "建议：max_length {value}（现为 {current}；前 {rows} 行中有 {cut} 行更长、会被截断，最长的有 {longest} 个 token）",
    },
}


def suggestion_text(key: str, value, params: dict, lang: str = "en") -> str:
    return SUGGESTIONS[key]["zh" if lang == "zh" else "en"].format(value=value, **params)

"""The interface language (English / 中文): one catalogue per language.

A setting's label and help come from the run-config schema in English (each field's title and description) and
from `backend/config/zh.py` in Chinese, keyed by the setting's path; the page's own words (every tab's labels, help
texts, buttons, section titles, intros and Radio choice labels) are in UI below, and each tab builds its components
with their words from there. `tests/unit/test_i18n.py` keeps every key in both languages and
`tests/unit/test_page_language.py` checks that no word on the page stays English. Errors keep naming settings by
their path, which is the same in both.

The page is built once, in English; choosing a language (the header's selector, remembered per browser, or
`launch.py ui --lang zh` for browsers that have not chosen) sends each registered component its words. Messages
that handlers write later (status lines, progress, notifications, confirmations, table headers) follow the
language too: the selector and the page's load remember it for the browser session (`remember`), and a handler
that declares `request: gr.Request` asks for it (`lang_of`), so no event needs an extra input. Messages that come
from the backend (a setting's validation error, a dataset's missing column) stay English inside the app's
translated words around them: they name fields by path.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import gradio as gr

from backend.config.build import field_paths
from backend.config.zh import ZH
from backend.rewards.spec import RewardSourceConfig

LANGUAGES = {"en": "English", "zh": "中文"}
DEFAULT = "en"

# key -> (English, Chinese)
UI: dict[str, tuple[str, str]] = {
    "tab.train": ("Train", "训练"),
    "tab.runs": ("Runs", "运行"),
    "tab.evaluate": ("Evaluate", "评估"),
    "tab.sweeps": ("Sweeps", "超参搜索"),
    "tab.playground": ("Reward playground", "奖励试验场"),
    "tab.chat": ("Chat", "对话"),
    "tab.labeling": ("Labeling", "标注"),
    "train.start": ("Start training", "开始训练"),
    "train.stop": ("Stop", "停止"),
    "train.show_cli": ("Show CLI command", "显示命令行"),
    "train.check_rewards": ("Check rewards", "检查奖励"),
    "train.apply_fix": ("Apply the suggested settings", "应用建议的设置"),
    "train.show_example": ("Show the first example as the trainer sees it", "显示训练器看到的第一个样本"),
    "train.upload": ("Upload a dataset", "上传数据集"),
    "train.preview": ("Dataset preview", "数据集预览"),
    "train.advanced": ("Advanced settings", "高级设置"),
    "train.presets": ("Presets", "预设"),
    "runs.stop": ("Stop run", "停止运行"),
    "runs.resume": ("Resume run", "恢复运行"),
    "runs.evaluate": ("Evaluate", "评估"),
    "runs.fix": ("Fix and restart", "修正并重新开始"),
    "runs.delete": ("Delete run", "删除运行"),
    "runs.select": ("Selected run", "所选运行"),
    "section.compute": ("Compute", "计算"),
    "section.constraint": ("Cost constraint", "代价约束"),
    "section.data": ("Data", "数据"),
    "section.distributed": ("Distributed", "分布式"),
    "section.dpo": ("DPO", "DPO"),
    "section.eval": ("Evaluation", "评估"),
    "section.kto": ("KTO", "KTO"),
    "section.orpo": ("ORPO", "ORPO"),
    "section.cpo": ("CPO", "CPO"),
    "section.simpo": ("SimPO", "SimPO"),
    "section.gkd": ("GKD (distillation)", "GKD（蒸馏）"),
    "section.online_dpo": ("Online DPO", "在线 DPO"),
    "section.lora": ("LoRA", "LoRA"),
    "section.ppo": ("PPO", "PPO"),
    "section.rl": ("Reinforcement learning", "强化学习"),
    # the page and words several tabs share
    "page.title": ("RL post-training workbench", "RL 后训练工作台"),
    "page.workspace": ("workspace", "工作区"),
    "page.warning": ("Warning:", "警告："),
    "common.dataset": ("Dataset", "数据集"),
    "common.download": ("Download", "下载"),
    "common.max_new_tokens": ("Max new tokens", "最大生成长度"),
    "common.seed": ("Seed", "随机种子"),
    "common.stop": ("Stop", "停止"),
    "common.temperature": ("Temperature", "温度系数"),
    "common.top_p": ("Top-p", "Top-p 采样值"),
    "common.use_train_sources": ("Use the Train tab's sources", "使用训练页的奖励来源"),
    "form.comma_separated": ("comma-separated", "用逗号分隔"),
    # Train
    "train.preset": ("Preset", "预设"),
    "train.load_preset": ("Load preset", "载入预设"),
    "train.save_as": ("Save these settings as", "将当前设置保存为"),
    "train.save_preset": ("Save preset", "保存预设"),
    "train.cli": ("Same run from a terminal", "在终端中运行同样的训练"),
    # the reward-sources editor (Train tab and Reward playground)
    "reward.info": ("The reward is the weighted sum of these sources' scores; each is logged as `rewards/<name>/mean`. "
                    "Try them on a few completions in the Reward playground tab.",
                    "奖励是这些来源得分的加权和；每个来源记录为 `rewards/<name>/mean`。可先在“奖励试验场”页用几条回答试一试。"),
    **{f"reward.field.{name}": (RewardSourceConfig.model_fields[name].title + (" (YAML)" if name == "params" else ""),
                                zh) for name, zh in (("type", "类型"), ("name", "名称"), ("weight", "权重"),
                                                     ("params", "参数（YAML）"), ("role", "作用"), ("budget", "预算"),
                                                     ("when", "仅当"))},
    "reward.name_placeholder": ("the kind", "同类型名"),
    "reward.budget_placeholder": ("cost only", "仅限代价"),
    "reward.when_placeholder": ("always", "总是"),
    "reward.remove": ("Remove", "移除"),
    "reward.add_kind": ("Kind of the new source", "新来源的类型"),
    "reward.add": ("Add a reward source", "添加奖励来源"),
    "reward.kinds": ("Kinds:", "类型："),
    # Runs
    "runs.table": ("Runs (click a row to select it)", "运行列表（点击一行以选中）"),
    "runs.note": ("Note (saved when you press Enter or leave the box)", "备注（按回车或离开输入框时保存）"),
    "runs.note_placeholder": ("e.g. lr too high, diverged at step 40", "例如：学习率过高，第 40 步发散"),
    "runs.confirm_delete": ("Confirm delete", "确认删除"),
    "runs.samples": ("**Samples**: what the policy wrote at logging steps and how each reward source scored it",
                     "**样本**：策略在记录步生成的内容，以及各奖励来源给出的分数"),
    "runs.step": ("Step", "步数"),
    "runs.log": ("**Log** (last lines)", "**日志**（最后几行）"),
    "runs.adapter": ("Adapter (PEFT folder)", "适配器（PEFT 文件夹）"),
    "runs.adapter_placeholder": ("written when the run ends", "运行结束时写入"),
    "runs.config": ("Run config", "运行配置"),
    "log.title": ("Full log", "完整日志"),
    "log.path": ("Log file", "日志文件"),
    "log.search": ("Search the log", "搜索日志"),
    "log.search_placeholder": ("lines containing this text (any case)", "包含此文本的行（不区分大小写）"),
    "log.refresh": ("Refresh", "刷新"),
    "log.none": ("(no log yet)", "（暂无日志）"),
    "log.lines": ("{n} lines; repeated library warnings shown once with their count",
                  "共 {n} 行；重复的库警告只显示一次并注明次数"),
    "log.matches": ("{n} of {total} lines contain “{query}”", "{total} 行中有 {n} 行包含“{query}”"),
    "log.last": (" · the last {n} shown", " · 显示最后 {n} 行"),
    "log.cut": (" · read from the file's last {mb} MB", " · 仅读取文件的最后 {mb} MB"),
    "serve.title": ("Serve (OpenAI API)", "部署为服务（OpenAI API）"),
    "serve.intro": ("The selected run served over the OpenAI API (`/v1/chat/completions` with streaming, "
                    "`/v1/completions`, `/v1/models`) by `transformers serve`, its adapter merged in once. Bound to "
                    "127.0.0.1 unless you type another address; `launch.py serve list` lists the servers.",
                    "用 `transformers serve` 通过 OpenAI API（`/v1/chat/completions`（支持流式）、`/v1/completions`、"
                    "`/v1/models`）部署所选运行，适配器只合并一次。除非填写其他地址，否则只监听 127.0.0.1；"
                    "`launch.py serve list` 列出所有服务。"),
    "serve.intro_chat": ("Model A served over the OpenAI API (`/v1/chat/completions` with streaming, "
                         "`/v1/completions`, `/v1/models`) by `transformers serve`, an adapter merged in once; the same "
                         "as `launch.py serve MODEL`.",
                         "用 `transformers serve` 通过 OpenAI API（`/v1/chat/completions`（支持流式）、`/v1/completions`、"
                         "`/v1/models`）部署模型 A，适配器只合并一次；等同于 `launch.py serve MODEL`。"),
    "serve.pick_model": ("Pick model A first.", "请先选择模型 A。"),
    "serve.host": ("Address", "地址"),
    "serve.port": ("Port", "端口"),
    "serve.key": ("API key (optional, 8+ characters)", "API 密钥（可选，至少 8 个字符）"),
    "serve.key_placeholder": ("empty: the UI's password", "留空：使用界面的密码"),
    "serve.start": ("Serve", "启动服务"),
    "serve.stop": ("Stop serving", "停止服务"),
    "serve.refresh": ("Refresh", "刷新"),
    "serve.failed": ("The server failed", "服务失败"),
    "serve.cannot": ("Cannot serve", "无法启动服务"),
    "serve.loading": ("Loading the model (its adapter merged in once)", "正在加载模型（适配器只合并一次）"),
    "serve.status.loading": ("loading", "加载中"),
    "serve.status.serving": ("serving", "服务中"),
    "serve.status.stopped": ("stopped", "已停止"),
    "serve.status.failed": ("failed", "失败"),
    "serve.counts": ("{n} requests · {rate} tokens/s", "{n} 个请求 · 每秒 {rate} 个 token"),
    "serve.key_needed": ("clients send the API key as `Authorization: Bearer KEY`",
                         "客户端需以 `Authorization: Bearer KEY` 发送 API 密钥"),
    "serve.key_short": ("the API key must have at least 8 characters", "API 密钥至少需要 8 个字符"),
    "export.title": ("Export", "导出"),
    "push.repo": ("Hub repo", "Hub 仓库"),
    "push.repo_placeholder": ("user/name", "用户名/模型名"),
    "push.token": ("Hugging Face token (write)", "Hugging Face 令牌（写权限）"),
    "push.token_placeholder": ("empty: HF_TOKEN or `hf auth login`", "留空：使用 HF_TOKEN 或 `hf auth login`"),
    "push.merged": ("Merged model (not the adapter)", "合并模型（而非适配器）"),
    "push.private": ("Private repo", "私有仓库"),
    "push.button": ("Push to the Hub", "推送到 Hub"),
    "push.cannot": ("Cannot push", "无法推送"),
    "push.done": ("**Pushed** to {url} (from `{folder}`)", "**已推送**到 {url}（来自 `{folder}`）"),
    "export.gguf": ("Export GGUF (llama.cpp, Ollama)", "导出 GGUF（llama.cpp、Ollama）"),
    "export.quant": ("GGUF type", "GGUF 类型"),
    "export.quant_info": ("f16 keeps the weights; q8_0 halves them again; k-quants need llama.cpp's quantizer",
                          "f16 保留权重；q8_0 再减半；k-quant 需要 llama.cpp 的量化工具"),
    "export.ollama": ("Ollama: `ollama create NAME -f {path}`, then `ollama run NAME`",
                      "Ollama：`ollama create NAME -f {path}`，然后 `ollama run NAME`"),
    "export.dtype": ("Merged weights", "合并模型的权重类型"),
    "export.dtype_info": ("auto: the base model's own (bf16 halves the files)", "auto：与基础模型相同（bf16 文件减半）"),
    "export.intro": ("**Adapter**: a standard PEFT folder (adapter_config.json, adapter_model.safetensors, tokenizer "
                     "and chat template) for `PeftModel.from_pretrained`. **Merged model**: the adapter folded into the "
                     "base weights (safetensors) for plain `AutoModelForCausalLM` (reward models: "
                     "`AutoModelForSequenceClassification`). Each comes with a model card (README.md: config, final "
                     "metrics, a metrics plot, how to load it). **GGUF**: the merged model as one file for llama.cpp, "
                     "Ollama and LM Studio, with an Ollama Modelfile. **Push** uploads the adapter or the merged "
                     "model to a Hub repo. From a shell: `python launch.py export RUN_ID --out DIR [--merge | "
                     "--format gguf --quant q8_0] [--zip]`, `python launch.py push RUN_ID --repo user/name`.",
                     "**适配器**：标准的 PEFT 文件夹（`adapter_config.json`、`adapter_model.safetensors`、分词器和对话模板），"
                     "用 `PeftModel.from_pretrained` 加载。**合并模型**：适配器并入基座权重（safetensors），直接用 "
                     "`AutoModelForCausalLM` 加载（奖励模型用 `AutoModelForSequenceClassification`）。两者都附带模型卡"
                     "（README.md：配置、最终指标、指标曲线图和加载方法）。**GGUF**：合并模型写成单个文件，供 llama.cpp、"
                     "Ollama 和 LM Studio 使用，附 Ollama Modelfile。**推送**把适配器或合并模型上传到 Hub 仓库。命令行："
                     "`python launch.py export RUN_ID --out DIR [--merge | --format gguf --quant q8_0] [--zip]`、"
                     "`python launch.py push RUN_ID --repo user/name`。"),
    "export.zip": ("Download adapter (.zip)", "下载适配器（.zip）"),
    "export.merge": ("Export merged model", "导出合并模型"),
    "compare.title": ("Compare runs", "对比运行"),
    "compare.help": ("Pick runs to overlay every metric they logged (smoothed line, raw points faint; click a run in "
                     "the legend to hide it). Below: the settings that differ between them, where each one ended and "
                     "how each one's latest evaluation (Evaluate tab) scored. "
                     "From a shell: `python launch.py compare RUN_ID RUN_ID ...`.",
                     "选择几个运行，把它们记录的每个指标叠加在同一张图上（平滑曲线，原始点较淡；点击图例中的运行可隐藏它）。"
                     "下方依次是：它们之间不同的设置、各自的最终值，以及各自最近一次评估（评估页）的得分。"
                     "命令行：`python launch.py compare RUN_ID RUN_ID ...`。"),
    "compare.pick": ("Runs to compare (up to {n})", "要对比的运行（最多 {n} 个）"),
    "compare.settings": ("Settings that differ", "不同的设置"),
    "compare.finals": ("Final values (last logged)", "最终值（最后一次记录）"),
    "compare.evals": ("Latest evaluation of each run (mean [95% interval])", "各运行最近一次评估（均值 [95% 区间]）"),
    # Evaluate
    "eval.intro": ("Generate with each model on an evaluation set and score the answers; the first model is the "
                   "baseline the others are compared with (`base`: the base model of the others). It runs in the "
                   "background and queues for the training slot; from a shell: `python launch.py eval --model run:ID "
                   "--against base --dataset FILE --scorer numeric_match:answer`.",
                   "让每个模型在评估集上生成回答并打分；第一个模型是基线，其余模型都与它比较（`base`：其余模型的基座模型）。"
                   "评估在后台运行，与训练共用同一个执行槽位排队；命令行：`python launch.py eval --model run:ID "
                   "--against base --dataset FILE --scorer numeric_match:answer`。"),
    "eval.models": ("Models (the first is the baseline)", "模型（第一个为基线）"),
    "evals.run_heading": ("**Evaluations** (Evaluate tab for the examples)", "**评估**（示例见评估页）"),
    "evals.run_baseline": (" (baseline {score})", "（基线 {score}）"),
    "evals.run_vs": ("; vs {label}: {wins} win / {ties} tie / {losses} loss",
                     "；对比 {label}：{wins} 胜 / {ties} 平 / {losses} 负"),
    "evals.run_line": ("- `{id}` on {dataset} ({rows} rows): {scores}{vs}", "- `{id}` 在 {dataset} 上（{rows} 行）：{scores}{vs}"),
    "evals.run_no_scorers": ("no scorers", "无评分器"),
    "eval.base_choice": ("base (of the other models)", "基座（其他模型的基座模型）"),
    "eval.checkpoint_choice": ("{name} · checkpoint at step {step} ({id})", "{name} · 第 {step} 步的检查点（{id}）"),
    "eval.heldout_choice": ("held-out rows of {name} · {id}", "{name} 的留出数据 · {id}"),
    "eval.dataset": ("Evaluation set", "评估集"),
    "eval.prompt_column": ("Prompt column", "提示列"),
    "eval.reference_column": ("Reference column", "参考答案列"),
    "eval.auto": ("auto", "自动"),
    "eval.scorers": ("Scorers", "评分器"),
    "eval.scorers_help": ("One scorer per line: `rouge_l`, `bleu`, `chrf`, `math` (against the reference column, or "
                          "`rouge_l:COLUMN`), or a reward source: `numeric_match:answer`, `exact_match:answer`, "
                          "`regex:PATTERN`, `length:50`, `blocklist:word,word`, `repetition`, `reward_model:run:ID`, "
                          "`embedding_similarity:answer`, `python:rewards.py`, or a JSON line "
                          '`{"type": "length", "weight": 0.5, "params": {"target": 20}}`.',
                          "每行一个评分器：`rouge_l`、`bleu`、`chrf`、`math`（与参考答案列比较，或写成 `rouge_l:COLUMN`），"
                          "或一个奖励来源：`numeric_match:answer`、`exact_match:answer`、`regex:PATTERN`、`length:50`、"
                          "`blocklist:word,word`、`repetition`、`reward_model:run:ID`、`embedding_similarity:answer`、"
                          "`python:rewards.py`，或一行 JSON："
                          '`{"type": "length", "weight": 0.5, "params": {"target": 20}}`。'),
    "eval.generation": ("Generation", "生成设置"),
    "eval.limit": ("Row limit (empty: all)", "行数上限（留空：全部）"),
    "eval.batch_size": ("Batch size", "批处理大小"),
    "eval.sample": ("Sample (off: greedy, reproducible)", "采样（关闭：贪心解码，可复现）"),
    "eval.samples": ("Answers per prompt (pass@k)", "每个提示的回答数（pass@k）"),
    "eval.name": ("Name (optional)", "名称（可选）"),
    "eval.start": ("Start evaluation", "开始评估"),
    "eval.select": ("Evaluation", "评估任务"),
    "eval.results": ("Results", "结果"),
    "eval.examples": ("Examples", "样例"),
    "eval.category.all": ("all", "全部"),
    "eval.category.B_better": ("B better", "B 更好"),
    "eval.category.A_better": ("A better", "A 更好"),
    "eval.category.same": ("same", "相同"),
    "eval.category.both_wrong": ("both wrong", "都错"),
    "eval.model_b": ("Model B", "模型 B"),
    "eval.predictions_jsonl": ("Predictions (.jsonl)", "预测结果（.jsonl）"),
    "eval.predictions_parquet": ("Predictions (.parquet)", "预测结果（.parquet）"),
    # Sweeps
    "sweeps.intro": ("Search settings with Optuna's Bayesian (TPE) sampler. Every trial is an ordinary run (it shows "
                     "in **Runs** with live plots); the sweep runs on its own, so closing this page never stops it. "
                     "Trials are whole runs: keep the base's `max_steps` small.",
                     "用 Optuna 的贝叶斯（TPE）采样器搜索超参数。每次试验都是一个普通的运行（在**运行**页显示实时曲线）；"
                     "搜索独立运行，关闭本页面不会停止它。每次试验都是完整的训练：请把基础配置的 `max_steps` 设小一些。"),
    "sweeps.new": ("New sweep", "新建超参搜索"),
    "sweeps.spec_preset": ("Load a sweep preset", "载入搜索预设"),
    "sweeps.base_preset": ("Base: a run preset", "基础配置：一个运行预设"),
    "sweeps.from_train": ("Use the Train tab's settings as the base", "以训练页的设置作为基础配置"),
    "sweeps.base": ("Base run config (YAML; every trial starts from it)", "基础运行配置（YAML；每次试验都从它出发）"),
    "sweeps.objective": ("**Objective**: a metric the trainer logs, reduced to one value per run",
                         "**优化目标**：训练器记录的一个指标，每个运行归约为一个值"),
    "sweeps.metric": ("Metric", "指标"),
    "sweeps.direction": ("Direction", "方向"),
    "sweeps.minimize": ("minimize", "最小化"),
    "sweeps.maximize": ("maximize", "最大化"),
    "sweeps.reduce": ("Run's value", "运行的取值"),
    "sweeps.reduce.last": ("last value", "最后一个值"),
    "sweeps.reduce.mean_last": ("mean of the last k", "最后 k 个值的均值"),
    "sweeps.reduce.best": ("best value", "最佳值"),
    "sweeps.last_k": ("k (mean of the last k)", "k（最后 k 个值的均值）"),
    "sweeps.trials": ("Trials", "试验次数"),
    "sweeps.name": ("Sweep name", "搜索名称"),
    "sweeps.name_placeholder": ("generated", "自动生成"),
    "sweeps.prune": ("Prune poor trials early (stop a trial whose metric is worse than the median of earlier trials "
                     "at the same step)", "提前剪枝较差的试验（某次试验的指标在同一步上差于之前试验的中位数时停止它）"),
    "sweeps.space": ("**Search space**: the settings to search; a new row's range sits around the base's value",
                     "**搜索空间**：要搜索的设置；新增一行时，其范围围绕基础配置中的取值"),
    "sweeps.setting": ("Setting", "设置项"),
    "sweeps.kind": ("Kind", "类型"),
    "sweeps.low": ("Low", "下限"),
    "sweeps.high": ("High", "上限"),
    "sweeps.choices": ("Choices (categorical, comma-separated)", "候选值（类别型，用逗号分隔）"),
    "sweeps.add": ("+ Add a setting", "+ 添加设置项"),
    "sweeps.start": ("Start sweep", "开始搜索"),
    "sweeps.table": ("Sweeps (click a row to select it)", "超参搜索列表（点击一行以选中）"),
    "sweeps.select": ("Selected sweep", "所选搜索"),
    "sweeps.stop": ("Stop sweep", "停止搜索"),
    "sweeps.more": ("Trials to add on resume", "恢复时追加的试验数"),
    "sweeps.resume": ("Resume", "恢复"),
    "sweeps.trials_table": ("Trials (★ best; click a row to open its run)", "试验（★ 最佳；点击一行打开对应的运行）"),
    "sweeps.best": ("Best trial's run config (copy it, or train it)", "最佳试验的运行配置（可复制，或直接训练）"),
    "sweeps.best_to_train": ("Open it in the Train tab", "在训练页中打开"),
    "sweeps.train_best": ("Train the best config", "训练最佳配置"),
    # Reward playground
    "play.intro": ("Try reward sources on a few completions before training with them: do they tell good answers "
                   "from bad ones, or is one stuck at a single value?",
                   "在用奖励来源训练之前，先拿几条回答试一试：它们能否区分好回答和坏回答，还是某个来源总给出同一个值？"),
    "play.sources": ("Reward sources", "奖励来源"),
    "play.prompts": ("Prompts", "提示"),
    "play.first": ("First row", "起始行"),
    "play.count": ("Prompts", "提示数"),
    "play.completions": ("Completions", "回答"),
    "play.completions_help": ("One per line, or blocks separated by a `{sep}` line; one per prompt, or the same number "
                              "for each prompt in prompt order. Generate fills this box; edit it freely.",
                              "每行一条，或用单独一行 `{sep}` 分隔成多段；每个提示一条，或每个提示相同条数（按提示顺序）。"
                              "“生成”会填入此框，可随意编辑。"),
    "play.generate_with": ("Generate with a model", "用模型生成"),
    "play.num_help": ("Sampled for each prompt.", "每个提示采样的条数。"),
    "play.max_new_help": ("Per completion.", "每条回答的上限。"),
    "play.temperature_help": ("0: greedy.", "0：贪心解码。"),
    "play.generate": ("Generate", "生成"),
    "play.lambda": ("λ for costs", "代价的 λ"),
    "play.lambda_help": ("Each unit of a cost source's cost takes λ off the total.", "代价来源的每单位代价从总分中扣去 λ。"),
    "play.score": ("Score", "打分"),
    "play.summary_empty": ("Score some completions to see each source's mean and spread here.",
                           "给一些回答打分后，这里会显示每个来源的均值和离散程度。"),
    # Chat
    "chat.intro": ("Ask two models the same thing and compare their answers as they are written: the base model, the "
                   "base with a finished run's adapter, or a merged export. Each side keeps its own conversation.",
                   "向两个模型提同样的问题，边生成边比较回答：基座模型、加上已完成运行适配器的基座模型，或导出的合并模型。"
                   "两侧各自保留自己的对话。"),
    "chat.model": ("Model {side}", "模型 {side}"),
    "chat.model_help": ("A base model, a run (base + its adapter) or a merged export; or type a model folder or Hub id.",
                        "基座模型、一个运行（基座 + 其适配器）或导出的合并模型；也可输入模型文件夹或 Hub 模型 ID。"),
    "chat.answers_here": ("Model {side}'s answers appear here.", "模型 {side} 的回答显示在这里。"),
    "chat.prompt": ("Prompt", "提示"),
    "chat.prompt_placeholder": ("Ask both models… (Enter sends, Shift+Enter: new line)",
                                "向两个模型提问……（Enter 发送，Shift+Enter 换行）"),
    "chat.send": ("Send", "发送"),
    "chat.clear": ("Clear", "清空"),
    "chat.refresh": ("↻ Models", "↻ 模型"),
    "chat.settings": ("System prompt and sampling", "系统提示词与采样"),
    "chat.system": ("System prompt", "系统提示词"),
    "chat.system_placeholder": ("Empty: the model's chat template decides (SmolLM2 adds its own).",
                                "留空：由模型的对话模板决定（SmolLM2 会加上自己的）。"),
    "chat.temperature_help": ("0: greedy (the same answer every time).", "0：贪心解码（每次回答相同）。"),
    "chat.scoring": ("Score the last answers with reward sources", "用奖励来源给最后的回答打分"),
    "chat.from_run": ("Sources of a run", "某个运行的奖励来源"),
    "chat.from_run_help": ("Copies that run's reward_sources into the box below.", "把该运行的 reward_sources 复制到下面的框中。"),
    "chat.sources": ("Reward sources (YAML)", "奖励来源（YAML）"),
    "chat.columns": ("Dataset columns (optional)", "数据集列（可选）"),
    "chat.columns_help": ("For sources that read a dataset column (exact_match, numeric_match, embedding_similarity): "
                          "its value for this prompt, as YAML, e.g. `answer: 42`.",
                          "供读取数据集列的来源使用（exact_match、numeric_match、embedding_similarity）：该列对本提示的取值，"
                          "写成 YAML，例如 `answer: 42`。"),
    "chat.score": ("Score with reward sources", "用奖励来源打分"),
    # Labeling
    "label.intro": ("Compare two answers to each prompt (or rate one) and every label is saved at once. Keys: "
                    "**1** A better · **2** B better · **3** tie · **4** both bad · **U** undo "
                    "(single answers: **1** good, **2** bad, **3** unsafe).",
                    "比较每个提示的两个回答（或给单个回答评分），每条标注都会立即保存。快捷键："
                    "**1** A 更好 · **2** B 更好 · **3** 平局 · **4** 都不好 · **U** 撤销"
                    "（单个回答：**1** 好，**2** 差，**3** 不安全）。"),
    "label.new": ("New labeling session", "新建标注会话"),
    "label.mode": ("What to label", "标注内容"),
    "label.mode.pair": ("Compare two answers (DPO, reward model)", "比较两个回答（DPO、奖励模型）"),
    "label.mode.single": ("Rate one answer, thumbs up / down (KTO)", "给单个回答评分，赞 / 踩（KTO）"),
    "label.compare": ("Where A and B come from", "A 和 B 的来源"),
    "label.compare.samples": ("Two samples of one model", "同一模型的两次采样"),
    "label.compare.models": ("Two models side by side", "两个模型并排比较"),
    "label.name": ("Session name", "会话名称"),
    "label.name_placeholder": ("generated when empty", "留空时自动生成"),
    "label.model": ("Model", "模型"),
    "label.model_help": ("A model, or a finished run (its base model + adapter).", "一个模型，或一个已完成的运行（其基座模型 + 适配器）。"),
    "label.model_b": ("Model B", "模型 B"),
    "label.model_b_help": ("Compared with the first model, side by side.", "与第一个模型并排比较。"),
    "label.temperature": ("Temperature ({side})", "温度系数（{side}）"),
    "label.overlap": ("Labels per pair", "每对的标注数"),
    "label.overlap_help": ("Above 1: several people label each item (agreement).", "大于 1：每条由多人标注（用于一致性）。"),
    "label.source": ("Prompts from", "提示来源"),
    "label.source.dataset": ("A dataset column", "数据集中的一列"),
    "label.source.upload": ("An uploaded file", "上传的文件"),
    "label.source.typed": ("Typed prompts", "手动输入的提示"),
    "label.column": ("Column", "列名"),
    "label.limit": ("Prompts (first N; 0: all)", "提示数（前 N 条；0：全部）"),
    "label.upload": ("Prompt file (.txt one per line, or .jsonl/.csv/.parquet with the column)",
                     "提示文件（.txt 每行一条，或带该列的 .jsonl / .csv / .parquet）"),
    "label.typed": ("Prompts, one per line (or separated by --- lines)", "提示，每行一条（或用 --- 行分隔）"),
    "label.start": ("Start a new labeling session", "开始新的标注会话"),
    "label.session": ("Labeling session", "标注会话"),
    "label.annotator": ("Annotator", "标注者"),
    "label.annotator_help": ("Recorded with each label.", "随每条标注一起记录。"),
    "label.resume": ("Resume generation", "恢复生成"),
    "label.choice.a": ("A is better  [1]", "A 更好  [1]"),
    "label.choice.b": ("B is better  [2]", "B 更好  [2]"),
    "label.choice.tie": ("Tie  [3]", "平局  [3]"),
    "label.choice.both_bad": ("Both bad  [4]", "都不好  [4]"),
    "label.choice.up": ("Good: thumbs up  [1]", "好：赞  [1]"),
    "label.choice.down": ("Bad: thumbs down  [2]", "差：踩  [2]"),
    "label.choice.unsafe": ("Unsafe: unwanted content  [3]", "不安全：不当内容  [3]"),
    "label.undo": ("Undo last label  [U]", "撤销上一条标注  [U]"),
    "label.note": ("Note (optional, saved with the label)", "备注（可选，随标注保存）"),
    "label.edit_box": ("Edit the better answer before saving (optional)", "保存前修改较好的回答（可选）"),
    "label.edit": ("Edited answer", "修改后的回答"),
    "label.edit_help": ("Saved with the label and exported as the chosen answer (for both bad: a good answer written "
                        "by you).", "随标注保存，并作为被选回答导出（都不好时：由你写出一个好回答）。"),
    "label.start_from": ("Start from {side}", "从 {side} 开始"),
    "label.export_box": ("Export and train", "导出与训练"),
    "label.format": ("Format", "格式"),
    "label.format.dpo": ("DPO / reward model: prompt, chosen, rejected", "DPO / 奖励模型：prompt、chosen、rejected"),
    "label.format.kto": ("KTO: prompt, completion, label", "KTO：prompt、completion、label"),
    "label.format.cost": ("Cost classifier: pairs, the answer tagged unsafe above the others (single answers; train a "
                          "reward model on it, use it as a cost)",
                          "代价分类器：成对数据，标为不安全的回答排在其他回答之上（单个回答；用它训练奖励模型，作为代价使用）"),
    "label.file": ("File", "文件"),
    "label.chat": ("Conversational (chat messages)", "对话格式（聊天消息）"),
    "label.ties": ("Ties", "平局"),
    "label.drop": ("Drop", "丢弃"),
    "label.ties.keep": ("Keep (KTO: both good)", "保留（KTO：都算好）"),
    "label.both_bad": ("Both bad", "都不好"),
    "label.both_bad.keep": ("Keep (KTO: both bad; DPO: your edit beats each)", "保留（KTO：都算差；DPO：你修改的回答优于两者）"),
    "label.export": ("Export labels", "导出标注"),
    "label.train.dpo": ("Train DPO on these labels", "用这些标注训练 DPO"),
    "label.train.orpo": ("Train ORPO on these labels", "用这些标注训练 ORPO"),
    "label.train.simpo": ("Train SimPO on these labels", "用这些标注训练 SimPO"),
    "label.train.rm": ("Train a reward model on these labels", "用这些标注训练奖励模型"),
    "label.train.kto": ("Train KTO on these labels", "用这些标注训练 KTO"),
    "label.summary": ("Summary", "汇总"),
    "label.summary_refresh": ("Refresh summary", "刷新汇总"),
    # ---- messages handlers write (in the session's language; what the backend says inside them stays English) ----
    # a run's status and progress
    "status.queued": ("queued", "排队中"),
    "status.running": ("running", "运行中"),
    "status.completed": ("completed", "已完成"),
    "status.failed": ("failed", "失败"),
    "status.stopped": ("stopped", "已停止"),
    "status.interrupted": ("interrupted", "已中断"),
    "status.stopping": ("running (stopping)", "运行中（正在停止）"),
    "status.stop_requested": ("running · stop requested, saving the adapter", "运行中 · 已请求停止，正在保存适配器"),
    "status.forcing_in": ("forcing in {s} s", "{s} 秒后强制停止"),
    "status.forcing": ("forcing it now", "正在强制停止"),
    "status.attempt": ("attempt {n}", "第 {n} 次尝试"),
    "status.loading": ("loading the model and data", "正在加载模型和数据"),
    "status.step": ("step {step}", "第 {step} 步"),
    "status.steps": ("step {step}/{total}", "第 {step}/{total} 步"),
    "status.pace": ("{pace:.2f} s/step", "{pace:.2f} 秒/步"),
    "status.eta": ("ETA {left}", "预计剩余 {left}"),
    "status.took": ("took {took}", "用时 {took}"),
    "status.no_run": ("No run selected.", "未选择运行。"),
    "col.name": ("name", "名称"),
    "col.mode": ("mode", "模式"),
    "col.status": ("status", "状态"),
    "col.progress": ("progress", "进度"),
    "col.started": ("started", "开始时间"),
    "col.duration": ("duration", "时长"),
    "col.id": ("id", "ID"),
    "col.step": ("step", "步数"),
    "col.prompt": ("prompt", "提示"),
    "col.completion": ("completion", "回答"),
    "col.total": ("total", "总分"),
    "steps.all": ("all steps (newest first)", "全部步数（最新在前）"),
    "steps.one": ("step {step}", "第 {step} 步"),
    "msg.row": ("row {n}", "第 {n} 行"),
    "msg.memory": ("Estimated memory:", "显存估计："),
    "msg.memory_unknown": ("unknown", "未知"),
    "msg.no_estimate": ("no estimate", "无法估计"),
    "msg.example_failed": ("Cannot show the first example:", "无法显示第一个样本："),
    "msg.example_tokens": ("{tokens} tokens, {learned} learned from", "{tokens} 个 token，其中 {learned} 个参与学习"),
    "msg.select_run": ("Select a run first.", "请先选择一个运行。"),
    # Train
    "train.no_run": ("No run started from this tab yet. Start one and follow it here and in the Runs tab.",
                     "尚未从本页启动运行。启动后可在这里和“运行”页跟踪它。"),
    "train.cannot_start": ("Cannot start the run", "无法启动运行"),
    "train.could_not_start": ("Could not start the run", "启动运行失败"),
    "train.cannot_start_warning": ("Cannot start the run: {errors}", "无法启动运行：{errors}"),
    "train.started": ("Started **{name}** (`{id}`).{queued} Live plots are in the Runs tab.",
                      "已启动 **{name}**（`{id}`）。{queued}实时曲线在“运行”页。"),
    "train.queued": (" It is queued behind the running run.", "它在正在运行的任务之后排队。"),
    "train.nothing_to_stop": ("No queued or running run to stop.", "没有排队中或运行中的任务可停止。"),
    "train.stopping": ("Stopping **{name}**: it saves its adapter and exits.", "正在停止 **{name}**：它会保存适配器后退出。"),
    "train.outcome": ("**{name}** is {outcome}.", "**{name}** {outcome}。"),
    "train.gone": ("Run {id} no longer exists.", "运行 {id} 已不存在。"),
    "train.fix_first": ("fix the settings first: {error}", "请先修正设置：{error}"),
    "train.cannot_command": ("Cannot build the command", "无法生成命令"),
    "train.cannot_save": ("Cannot save the preset", "无法保存预设"),
    "train.saved_info": ("Saved preset {name}", "已保存预设 {name}"),
    "train.saved": ("Saved preset **{name}** to `{path}`.", "已将预设 **{name}** 保存到 `{path}`。"),
    "train.choose_preset": ("Choose a preset to load.", "请选择要载入的预设。"),
    "train.cannot_load": ("Cannot load the preset", "无法载入预设"),
    "train.loaded": ("Loaded preset **{name}**.", "已载入预设 **{name}**。"),
    "train.upload_refused": ("Upload refused", "上传被拒绝"),
    "train.uploaded": ("Uploaded **{name}** into the workspace and selected it.", "已将 **{name}** 上传到工作区并选中。"),
    "train.template_failed": ("the chat template failed on this example: {error}", "对话模板在此样本上出错：{error}"),
    "train.preview_unavailable": ("Dataset preview unavailable ({error})", "数据集预览不可用（{error}）"),
    "train.data_settings": ("Data settings:", "数据设置："),
    "train.converted": ("Converted:", "已转换："),
    "train.conversational": ("conversational", "对话格式"),
    "train.plain_text": ("plain text", "纯文本"),
    "train.ready": ("**Ready:** {name} format ({columns}, {kind}) · {rows} rows · ready for {mode}",
                    "**就绪：**{name} 格式（{columns}，{kind}）· {rows} 行 · 可用于 {mode}"),
    "train.cannot_train": ("Cannot train this dataset:", "无法用此数据集训练："),
    "train.detected_but": ("{name} format detected, but {error}", "检测到 {name} 格式，但 {error}"),
    "train.reward_prefilled": ("**Reward pre-filled:** {why}; edit it under Reward sources.",
                               "**已预填奖励：**{why}；可在“奖励来源”中修改。"),
    "train.memory_estimating": ("**Estimated memory:** estimating with the reward just filled in…",
                                "**显存估计：**正在按刚填入的奖励估算……"),
    "train.row_hint": ("Click a row to read it in full.", "点击一行可查看其完整内容。"),
    "train.row_title": ("Row {n}, in full", "第 {n} 行（完整内容）"),
    "train.row_clipped": ("(as the preview shows it: the dataset could not be read again: {error})",
                          "（预览中显示的内容：无法再次读取数据集：{error}）"),
    # Runs
    "runs.stopping": ("Stopping: the run saves its adapter and exits.", "正在停止：运行会保存适配器后退出。"),
    "doctor.title": ("Run doctor", "运行诊断"),
    "doctor.fixed": ("Settings of **{name}** with the doctor's suggestions (`{fix}`): check them, then click Start.",
                     "已载入 **{name}** 的设置并应用诊断建议（`{fix}`）：检查后点击开始。"),
    "doctor.no_fix": ("The doctor has no setting to suggest for this run.", "诊断对此运行没有可建议的设置。"),
    "doctor.rl_only": ("The reward check samples completions: choose an RL mode (grpo, rloo, ppo).",
                       "奖励检查需要采样回答：请选择强化学习模式（grpo、rloo、ppo）。"),
    "doctor.checking": ("Sampling one group of completions per prompt and scoring them…", "正在为每个提示采样一组回答并打分…"),
    "doctor.check_failed": ("The reward check could not run: {error}", "奖励检查无法运行：{error}"),
    "doctor.all_good": ("The rewards vary within groups: the run has a learning signal.",
                        "组内奖励有差异：运行有学习信号。"),
    "doctor.applied": ("Applied: `{fix}`", "已应用：`{fix}`"),
    "runs.outcome": ("The run is {outcome}.", "该运行{outcome}。"),
    "runs.resuming": ("{name}: attempt {attempt}, resuming from step {step} ({status}).",
                      "{name}：第 {attempt} 次尝试，从第 {step} 步恢复（{status}）。"),
    "runs.note_saved": ("Note saved for {name}.", "已保存 {name} 的备注。"),
    "runs.cannot_resume": ("Cannot resume: {why}", "无法恢复：{why}"),
    "runs.cannot_delete": ("Cannot delete: {why}", "无法删除：{why}"),
    "runs.stop_first": ("{name} is {status}: stop it first, then delete it.", "{name} {status}：请先停止，再删除。"),
    "runs.deleted": ("Deleted {name}: its metrics, samples and folder (checkpoints, adapter, log). Exports under "
                     "workspace/exports are kept.",
                     "已删除 {name}：包括其指标、样本和文件夹（检查点、适配器、日志）。workspace/exports 下的导出会保留。"),
    "runs.not_removed": ("Could not remove {what}", "无法删除 {what}"),
    "runs.confirm_run": ("Confirm: delete {name}", "确认：删除 {name}"),
    "runs.no_output": ("(no output yet)", "（暂无输出）"),
    "runs.error": ("Error", "错误"),
    "runs.flat": ("**Flat so far** (not drawn): {text}", "**目前没有变化**（未绘制）：{text}"),
    "runs.charts": ("{title} · {n} charts", "{title} · {n} 张图"),
    "runs.chart": ("{title} · 1 chart", "{title} · 1 张图"),
    # Sweeps
    "sweeps.at_most": ("At most {n} settings in one sweep.", "一次搜索最多 {n} 个设置项。"),
    "sweeps.cannot_start": ("Cannot start the sweep:", "无法开始搜索："),
    "sweeps.started_info": ("Sweep {name} started: {n} trials.", "超参搜索 {name} 已开始：{n} 次试验。"),
    "sweeps.started": ("Started **{name}** (`{id}`): {n} trials; its runs show in the Runs tab as they start.",
                       "已开始 **{name}**（`{id}`）：{n} 次试验；各试验的运行开始后会显示在“运行”页。"),
    "sweeps.select_first": ("Select a sweep first.", "请先选择一个超参搜索。"),
    "sweeps.stopping": ("Stopping: the current trial's run saves its adapter, then the sweep ends.",
                        "正在停止：当前试验的运行保存适配器后，搜索结束。"),
    "sweeps.outcome": ("The sweep is {outcome}.", "该搜索{outcome}。"),
    "sweeps.resumed": ("Resumed: finished trials are kept; it goes on to {n} trials.",
                       "已恢复：已完成的试验保留；将继续到 {n} 次试验。"),
    "sweeps.cannot_load": ("Cannot load this sweep file: {why}", "无法载入此搜索文件：{why}"),
    "sweeps.cannot_resume": ("Cannot resume the sweep: {why}", "无法继续搜索：{why}"),
    "sweeps.cannot_train_best": ("Cannot start a run with the best settings: {why}", "无法用最佳设置开始运行：{why}"),
    "sweeps.no_trial": ("No completed trial yet.", "还没有已完成的试验。"),
    "sweeps.started_run": ("Started {name}.", "已启动 {name}。"),
    "sweeps.train_invalid": ("The Train tab's settings are not valid yet: {errors}", "训练页的设置尚不合法：{errors}"),
    "sweeps.best_in_train": ("The best trial's settings are in the Train tab: raise max steps there to train it for "
                             "longer.", "最佳试验的设置已填入训练页：在那里调大最大步数即可训练更久。"),
    # Evaluate
    "eval.none": ("No evaluation selected.", "未选择评估。"),
    "eval.answers": (" ({done}/{total} answers)", "（{done}/{total} 个回答）"),
    "eval.cannot_start": ("Cannot start the evaluation", "无法开始评估"),
    "eval.could_not_start": ("Cannot start", "无法开始"),
    "eval.started": ("Started **{name}** (`{id}`): {status}.", "已开始 **{name}**（`{id}`）：{status}。"),
    "eval.ended": ("Evaluation **{name}** (`{id}`): {status}.", "评估 **{name}**（`{id}`）：{status}。"),
    "eval.activity.queued": ("waiting for a free slot", "等待空闲的运行位置"),
    "eval.activity.starting": ("starting", "正在启动"),
    "eval.activity.loading": ("loading {label} and generating its first answers…",
                              "正在加载 {label} 并生成第一批回答…"),
    "eval.activity.generating": ("generating answers with {label}", "正在用 {label} 生成回答"),
    "eval.activity.eta": (", about {eta} left", "，约剩 {eta}"),
    "eval.win_note": ("**Win rate** of a model over the baseline ({base}): the share of the rows both answered where "
                      "its {judge} score is higher, a tie counting half (0.5: no better, no worse); in brackets the "
                      "rows won / tied / lost.",
                      "模型对基线（{base}）的**胜率**：在两者都回答的行中，其 {judge} 得分更高的比例，平局记一半"
                      "（0.5：不好也不坏）；括号内为胜 / 平 / 负的行数。"),
    "eval.judge_sum": ("reward (the scorers' weighted sum)", "奖励（各评分器的加权和）"),
    "eval.no_examples": ("No examples in this category.", "此类别中没有样例。"),
    "eval.col.scores": ("scores", "得分"),
    "eval.note.training": ("This is the data {names} trained on: scores on it show what a run learned by heart, "
                           "not how it does on new prompts. The run held nothing out (eval.split 0, no "
                           "eval.dataset); choose another set to judge it fairly.",
                           "这是 {names} 训练所用的数据：在其上的得分只反映运行记住了什么，而不是它在新提示上的表现。"
                           "该运行没有留出数据（eval.split 为 0，也没有 eval.dataset）；请选择其他数据集以公平评估。"),
    "eval.note.heldout": ("The {share} of {dataset} that {name} held out (eval.split): it never trained on these rows.",
                          "{name} 从 {dataset} 中留出的 {share}（eval.split）：它从未在这些行上训练。"),
    "eval.note.heldout_set": ("The evaluation set of {name} ({dataset}, its eval.dataset): it never trained on it.",
                              "{name} 的评估集（{dataset}，即其 eval.dataset）：它从未在其上训练。"),
    "eval.note.eval_set": ("The evaluation set of {names} (eval.dataset): not trained on.",
                           "{names} 的评估集（eval.dataset）：未在其上训练。"),
    "eval.select_first": ("Select an evaluation first.", "请先选择一个评估。"),
    "eval.stopped": ("Evaluation {id}: {outcome}; the answers scored so far are kept.",
                     "评估 {id}：{outcome}；已打分的回答会保留。"),
    "eval.written": ("Predictions written to `{path}`.", "预测结果已写入 `{path}`。"),
    "eval.col.model": ("model", "模型"),
    "eval.col.rows": ("rows", "行数"),
    "eval.col.wins": ("win rate vs baseline (win / tie / loss)", "对基线的胜率（胜 / 平 / 负）"),
    "eval.baseline": ("baseline", "基线"),
    "eval.col.row": ("row", "行"),
    "eval.col.prompt": ("prompt", "提示"),
    "eval.col.reference": ("reference", "参考答案"),
    "eval.win": ("win", "胜"),
    "eval.tie": ("tie", "平"),
    "eval.loss": ("loss", "负"),
    "eval.against": ("against {base}, judged by {judge}", "对比 {base}，以 {judge} 评判"),
    "eval.no_comparison": ("no comparison yet", "暂无比较"),
    # Chat
    "chat.empty_answer": ("*(an empty answer)*", "*（空回答）*"),
    "chat.reply_failed": ("**{side}** failed: {error}", "**{side}** 失败：{error}"),
    "chat.reply_done": ("**{side}** done: {tokens} tokens, {speed:.1f} tokens/s",
                        "**{side}** 完成：{tokens} 个 token，{speed:.1f} token/秒"),
    "chat.reply_writing": ("**{side}** writing: {tokens} tokens, {speed:.1f} tokens/s",
                           "**{side}** 生成中：{tokens} 个 token，{speed:.1f} token/秒"),
    "chat.col.source": ("source", "来源"),
    "chat.col.weight": ("weight", "权重"),
    "chat.released": (" Released {n} model(s) no longer selected.", "已释放 {n} 个不再选用的模型。"),
    "chat.cannot_use": ("Cannot use this model", "无法使用此模型"),
    "chat.picked": ("Model {side}: **{name}** (loads on the first prompt).", "模型 {side}：**{name}**（在第一次提问时加载）。"),
    "chat.type_first": ("Type a prompt first.", "请先输入提示。"),
    "chat.pick_model": ("pick a model for side A or B (or both)", "请为 A 侧或 B 侧（或两侧）选择模型"),
    "chat.cannot_send": ("Cannot send", "无法发送"),
    "chat.loading": ("Loading model {side}: {name}…", "正在加载模型 {side}：{name}……"),
    "chat.writing": ("Writing…", "生成中……"),
    "chat.generation_failed": ("Generation failed", "生成失败"),
    "chat.not_kept": (" (the failed turn was not kept)", "（失败的这一轮未保留）"),
    "chat.cannot_score": ("Cannot score", "无法打分"),
    "chat.send_first": ("Send a prompt first: the last answer of each side is scored.",
                        "请先发送一个提示：打分的是每侧最后一条回答。"),
    "chat.scoring_failed": ("Scoring failed", "打分失败"),
    "chat.cannot_copy": ("Cannot copy", "无法复制"),
    "chat.copied_run": ("Copied the reward sources of run {id}.", "已复制运行 {id} 的奖励来源。"),
    "chat.train_sources_bad": ("The Train tab's sources have problems", "训练页的奖励来源有问题"),
    "chat.no_sources": ("no reward sources: give at least one (a YAML list of type, name, weight, params)",
                        "没有奖励来源：至少给一个（YAML 列表，每项含 type、name、weight、params）"),
    "chat.train_no_sources": ("The Train tab has no reward sources (add some under an RL mode).",
                              "训练页没有奖励来源（请在某个强化学习模式下添加）。"),
    "chat.copied_train": ("Copied the Train tab's reward sources.", "已复制训练页的奖励来源。"),
    "chat.stopped": ("Stopped; the answers so far are kept.", "已停止；已生成的回答会保留。"),
    # Reward playground
    "play.scored": ("**{n} completions scored.**", "**已为 {n} 条回答打分。**"),
    "play.penalty": ("At λ = {lam:g} the costs take {penalty:.3g} off the mean total (in training, λ moves by itself: "
                     "up while a cost is over its budget).",
                     "在 λ = {lam:g} 时，代价使平均总分减少 {penalty:.3g}（训练中 λ 会自行调整：代价超出预算时上升）。"),
    "play.all_vary": ("Every source varies across completions: each adds a learning signal.",
                      "每个来源的得分在不同回答间都有变化：每个来源都提供了学习信号。"),
    "play.now_score": (". Now **Score** them.", "。现在可以点击“**打分**”。"),
    "play.cannot_generate": ("Cannot generate", "无法生成"),
    "play.released": ("Released the previously loaded model; the next Generate loads this one.",
                      "已释放之前加载的模型；下次“生成”时会加载这个模型。"),
    # Sweeps: tables, status line and chart
    "status.pruned": ("pruned", "已剪枝"),
    "sweeps.col.trials": ("trials", "试验"),
    "sweeps.col.objective": ("objective", "优化目标"),
    "sweeps.col.best": ("best", "最佳"),
    "sweeps.col.trial": ("trial", "试验"),
    "sweeps.col.run": ("run", "运行"),
    "sweeps.dir.minimize": ("min", "最小化"),
    "sweeps.dir.maximize": ("max", "最大化"),
    "sweeps.none": ("No sweep selected. Start one above.", "未选择超参搜索。请在上方开始一个。"),
    "sweeps.status.trials": ("{done}/{total} trials", "{done}/{total} 次试验"),
    "sweeps.status.best": (" · best {metric} <b>{value:.6g}</b> (trial #{trial})",
                           " · 最佳 {metric} <b>{value:.6g}</b>（试验 #{trial}）"),
    "sweeps.status.stopping": (" · stopping after the current trial's run saves", " · 当前试验的运行保存后停止"),
    "sweeps.status.mattered": ("what mattered (fANOVA):", "各设置的重要性（fANOVA）："),
    "sweeps.plot.select": ("Select a sweep", "请选择一个超参搜索"),
    "sweeps.plot.no_values": ("No {metric} values yet", "还没有 {metric} 的取值"),
    "sweeps.plot.best": ("best so far", "目前最佳"),
    "sweeps.plot.title": ("{metric} per trial ({direction}, {reduce})", "每次试验的 {metric}（{direction}，{reduce}）"),
    # Export (Runs tab)
    "export.starting": ("Starting the export", "正在开始导出"),
    "export.cannot": ("Cannot export", "无法导出"),
    "export.failed": ("Export failed", "导出失败"),
    "export.done.adapter": ("Adapter exported.", "适配器已导出。"),
    "export.done.merged": ("Merged model exported.", "合并模型已导出。"),
    "export.done.gguf": ("GGUF exported (with an Ollama Modelfile).", "GGUF 已导出（附 Ollama Modelfile）。"),
    "export.done.full": ("Model exported (a copy: this run fine-tuned every weight, so there is nothing to merge).",
                         "模型已导出（一份副本：此运行微调了全部权重，无需合并）。"),
    "export.folder": ("- folder: `{path}`", "- 文件夹：`{path}`"),
    "export.zip_file": ("- zip ({size:.1f} MB, download it below): `{path}`", "- zip 压缩包（{size:.1f} MB，可在下方下载）：`{path}`"),
    "export.in_chat": ("- the Chat tab lists it as *export · {name}* (↻ Models)", "- “对话”页中显示为 *export · {name}*（↻ 模型）"),
    # Labeling
    "label.card.prompt": ("Prompt", "提示"),
    "label.card.answer": ("Answer", "回答"),
    "label.cannot_start": ("Cannot start the session", "无法开始会话"),
    "label.could_not_start": ("Could not start the session", "开始会话失败"),
    "label.cannot_start_warning": ("Cannot start the session: {error}", "无法开始会话：{error}"),
    "label.no_session": ("Start a labeling session above, or pick one to join.", "请在上方开始一个标注会话，或选择一个加入。"),
    **{f"label.name.{c}": words for c, words in (
        ("a", ("A better", "A 更好")), ("b", ("B better", "B 更好")), ("tie", ("tie", "平局")),
        ("both_bad", ("both bad", "都不好")), ("up", ("thumbs up", "赞")), ("down", ("thumbs down", "踩")),
        ("unsafe", ("unsafe", "不安全")))},
    "label.count": ("{labels} labeled / {remaining} remaining", "已标注 {labels} / 剩余 {remaining}"),
    "label.generated.pair": ("{done}/{total} pairs generated", "已生成 {done}/{total} 对"),
    "label.generated.answer": ("{done}/{total} answers generated", "已生成 {done}/{total} 个回答"),
    "label.ready": ("{n} ready to label", "{n} 条待标注"),
    "label.pace.pair": ("{s:.1f} s per pair", "每对 {s:.1f} 秒"),
    "label.pace.answer": ("{s:.1f} s per answer", "每个回答 {s:.1f} 秒"),
    "label.yours": ("your labels: {n}", "你的标注：{n}"),
    "label.gen_failed": ("Generation failed: {error}", "生成失败：{error}"),
    "label.unknown_error": ("unknown error", "未知错误"),
    "label.all_generated": ("Every answer is generated", "所有回答都已生成"),
    "label.all_labeled": ("**Every item is labeled.** Export the labels or train on them below.",
                          "**所有条目都已标注。**可在下方导出标注或用它们训练。"),
    "label.failed_resume": ("**Generation failed:** {error}. Press *Resume generation* to try again.",
                            "**生成失败：**{error}。请点击“*恢复生成*”重试。"),
    "label.waiting": ("Waiting for the next answers to be generated…", "正在等待生成下一批回答……"),
    "label.others": ("The remaining items are being labeled by others; new ones show here if they come free.",
                     "剩余条目正由其他人标注；如有条目空出，会显示在这里。"),
    "label.generating": ("Generating the first answers…", "正在生成第一批回答……"),
    "label.started": ("Started **{name}** (`{id}`): {n} prompts.", "已开始 **{name}**（`{id}`）：{n} 个提示。"),
    "label.not_saved": ("**Not saved:** {error}", "**未保存：**{error}"),
    "label.nothing_yet": ("Nothing to label yet: {why}", "暂无可标注的条目：{why}"),
    "label.nothing_to_undo": ("Nothing to undo: no label from this browser in this session.",
                              "没有可撤销的标注：此浏览器在本会话中还没有标注。"),
    "label.undid": ("Undid your label **{name}**; label this item again.", "已撤销你的标注“**{name}**”；请重新标注此条目。"),
    "label.cannot_export": ("Cannot export", "无法导出"),
    "label.nothing_to_export": ("**Nothing to export yet:** {what}.", "**暂无可导出的内容：**{what}。"),
    "label.exported": ("**Exported** {what}. Saved as `{path}`.", "**已导出** {what}。保存为 `{path}`。"),
    "label.no_pairs": ("**{name}** rates single answers (thumbs up / down): it gives no pairs for {mode}. Train KTO on "
                       "it, or a reward model on its unsafe tags (a cost classifier).",
                       "**{name}** 是对单个回答的评分（赞 / 踩）：无法为 {mode} 提供成对数据。请用它训练 KTO，"
                       "或用其中的不安全标记训练奖励模型（代价分类器）。"),
    "label.not_yet": ("**Not yet:** {error}", "**暂时不行：**{error}"),
    "label.train_set": ("The Train tab is set to **{mode}** on `{spec}` with the model `{base}`.",
                        "训练页已设为 **{mode}**，数据集 `{spec}`，模型 `{base}`。"),
    "label.sum.no_session": ("No session selected.", "未选择会话。"),
    "label.sum.no_labels": ("No labels yet.", "暂无标注。"),
    "label.sum.head": ("<b>{labels}</b> labels on <b>{items}</b> items by <b>{annotators}</b> annotators.",
                       "<b>{annotators}</b> 位标注者对 <b>{items}</b> 个条目做了 <b>{labels}</b> 条标注。"),
    **{f"label.sum.col.{k}": words for k, words in (
        ("label", ("label", "标注")), ("count", ("count", "数量")), ("share", ("share", "占比")),
        ("annotator", ("annotator", "标注者")), ("labels", ("labels", "标注数")), ("side", ("side", "侧")),
        ("won", ("won", "胜出")), ("share_decided", ("share of decided", "在分出胜负中的占比")),
        ("model", ("model", "模型")), ("wins", ("wins", "胜")), ("losses", ("losses", "负")), ("ties", ("ties", "平")),
        ("both_bad", ("both bad", "都不好")), ("win_rate", ("win rate", "胜率")), ("up", ("thumbs up", "赞")),
        ("down", ("thumbs down", "踩")), ("unsafe", ("unsafe", "不安全")), ("up_rate", ("up rate", "赞率")),
        ("unsafe_rate", ("unsafe rate", "不安全率")))},
    "label.sum.agreement": ("Agreement: <b>{rate}</b> of {pairs} annotator pairs chose the same, on {items} items "
                            "labeled by several people.",
                            "一致性：在 {items} 个由多人标注的条目上，{pairs} 对标注者中有 <b>{rate}</b> 选择相同。"),
    "label.sum.no_agreement": ("Agreement: no item was labeled by two annotators yet (set <i>Labels per pair</i> above "
                               "1 when starting a session to measure it).",
                               "一致性：还没有条目被两位标注者标注过（开始会话时把“<i>每对的标注数</i>”设为大于 1 即可衡量）。"),
    # the reward-sources editor
    "reward.at_most": ("At most {n} reward sources.", "最多 {n} 个奖励来源。"),
}


@functools.cache
def _english() -> dict[str, tuple[str, str]]:
    return {path: (info.title or path, info.description or "") for path, info in field_paths()}


def setting_text(path: str, lang: str) -> tuple[str, str]:
    """(label, help) of a setting in `lang`; English where the catalogue has no entry."""
    english = _english()[path]
    return ZH.get(path, english) if lang == "zh" else english


def text(key: str, lang: str, **values) -> str:
    """`key`'s words in `lang`, with `values` filled into its {names}."""
    en, zh = UI[key]
    words = zh if lang == "zh" else en
    return words.format(**values) if values else words


# The language each browser session shows, by Gradio's session hash: set by the selector and the page's load,
# read by handlers. Bounded: sessions come and go, and one forgotten falls back to the server's default.
SESSIONS_KEPT = 4096
_sessions: OrderedDict[str, str] = OrderedDict()
_sessions_lock = threading.Lock()
_fallback = [DEFAULT]  # the server's default (`launch.py ui --lang`), for sessions not (or no longer) known


def serve_default(lang: str) -> None:
    """The language of a session that has not told its own (build_app sets it from --lang)."""
    _fallback[0] = pick(lang)


def _session(request) -> str | None:
    return getattr(request, "session_hash", None) if request is not None else None


def remember(request, lang: str) -> str:
    """This browser session shows `lang` from now on; returns the language kept."""
    lang = pick(lang)
    if (key := _session(request)) is not None:
        with _sessions_lock:
            _sessions[key] = lang
            _sessions.move_to_end(key)
            while len(_sessions) > SESSIONS_KEPT:
                _sessions.popitem(last=False)
    return lang


def lang_of(request) -> str:
    """The language the session behind `request` shows (a handler's `request: gr.Request`; None: the default)."""
    key = _session(request)
    with _sessions_lock:
        return _sessions.get(key, _fallback[0]) if key is not None else _fallback[0]


def pick(lang) -> str:
    return lang if lang in LANGUAGES else DEFAULT


def english(key: str) -> str:
    return UI[key][0]


@dataclass
class Translatable:
    """The page's components with words to change: settings by path, the rest by UI key and property.

    `add` gives a component its English words at once (the page is built in English from UI, never from a
    second copy of the text) and remembers them for `updates`."""

    settings: dict[str, gr.Component] = field(default_factory=dict)
    # (component, property, UI key | [(UI key, value), ...] for choices | callable(lang) -> text, bold, format)
    words: list[tuple] = field(default_factory=list)

    def add(self, component, key=None, prop: str = "label", bold: bool = False, fmt: dict | None = None, **more):
        """`key`'s words as the component's `prop` (a section title is Markdown: bold=True gives "**Data**");
        `more` names further properties, prop=key (info=..., placeholder=..., value=...), or for a Radio
        choices=[(key, value), ...]: the shown labels change, the values stay. `fmt` fills {names} in the words;
        a callable key is called with the language (text built around values, e.g. the header)."""
        for p, k in ([(prop, key)] if key is not None else []) + list(more.items()):
            entry = (component, p, k, bold and p == prop, fmt or {})
            self.words.append(entry)
            setattr(component, p, self._words(entry, DEFAULT))
        return component

    @staticmethod
    def _words(entry, lang: str):
        _, prop, key, bold, fmt = entry
        if callable(key):
            return key(lang)
        if prop == "choices":
            return [(text(k, lang), value) for k, value in key]
        words = text(key, lang).format(**fmt) if fmt else text(key, lang)
        return f"**{words}**" if bold else words

    @property
    def components(self) -> list:
        return list(dict.fromkeys([*self.settings.values(), *(entry[0] for entry in self.words)]))

    def updates(self, lang: str) -> dict:
        lang = pick(lang)
        out: dict = {}
        for path, component in self.settings.items():
            label, help_text = setting_text(path, lang)
            out[component] = gr.update(label=label, info=help_text or None)
        for entry in self.words:
            component, prop = entry[0], entry[1]
            out[component] = {**out.get(component, gr.update()), prop: self._words(entry, lang)}
        return out


def given(words: Translatable | None) -> Translatable:
    """A tab built on its own (tests) still gets its English words: from a Translatable nobody reads."""
    return words if words is not None else Translatable()

"""The run-config schema in Chinese: (title, help) per setting path, next to the English source (each field's own
title and description). tests/unit/test_i18n.py keeps every setting in both languages; errors name settings by
their path in either language."""
from __future__ import annotations

ZH: dict[str, tuple[str, str]] = {
    "name": ("运行名称", "显示在运行列表中；留空则自动生成。"),
    "mode": ("训练模式", "sft：监督微调；rm：奖励模型训练；dpo：直接偏好优化；kto：Kahneman-Tversky 优化；orpo：优势比偏好优化；"
                     "cpo：对比偏好优化；simpo：简单偏好优化；ppo：近端策略优化；grpo：组相对策略优化；rloo：REINFORCE 留一法。"),
    "model": ("模型", "`smollm2-135m-instruct`（内置，离线可用）、本地 save_pretrained 文件夹、Hugging Face Hub 模型 id，"
                      "或 `run:<id>`：在一个已完成运行的模型上继续训练（其适配器只合并进基座一次），例如先 SFT 预热再 GRPO。"),
    "dataset": ("数据集", "内置演示集、JSONL / JSON / CSV / Parquet 文件、datasets.save_to_disk 文件夹、LLaMA-Factory 数据文件夹中的"
                        "数据集（文件夹/名称），或用逗号分隔的多个数据集（按 data.mix 混合）。"),
    "data.columns": ("数据集列", "当列名不是 TRL 的名称时，指明哪一列是哪一项：name=column 对，例如 `prompt=question, "
                              "completion=answer`（YAML：`{prompt: question, completion: answer}`）。在检测格式之前应用。名称为 TRL 的"
                              "（prompt、completion、chosen、rejected、label、messages、text）或奖励来源读取的列（`answer`）。留空：使用"
                              "数据集自己的列名。"),
    "data.system": ("系统消息", "为每个没有系统消息的对话加上这条系统消息（仅对话数据集）。留空：不添加。"),
    "data.max_samples": ("最大样本数", "最多使用数据集（以及评估数据集）的这么多行；0：全部行。"),
    "data.shuffle": ("采样前打乱", "按运行的随机种子随机选取最大样本数的行，而不是取前面的行。训练批次无论如何都会打乱。"),
    "data.max_row_chars": ("每行最大字符数", "文本（所有列合计）超过此长度的行，在加载任何东西之前就被拒绝并给出行号和大小，或在“过长行”为"
                                       " truncate 时被截短：对一行 50 MB 的文本分词要花几分钟和数 GB 内存，而模型最多只看最大长度个 token。"
                                       "0：不限制。"),
    "data.long_rows": ("过长行", "超过每行最大字符数的行：refuse 会指出它（以及其他所有这样的行）以便修正文件；truncate 在分词前把该行截到"
                                "这么多字符（前面的文本，即提示，完整保留；截去最后一段）。"),
    "data.chat_template": ("对话模板", "对话如何变成文本：model 使用模型自带的模板；或改用 chatml、qwen、llama-3、mistral、gemma（该系列的特殊"
                                   " token，用于其基座模型）或 plain（“角色: 文本”行，适用于任何分词器），例如用于没有模板的基座模型。训练出的"
                                   "适配器会保留它。"),
    "data.mix": ("混合方式", "有多个数据集时（在数据集字段中用逗号分隔）：concat 依次训练它们（批次本来就会打乱）；interleave 按下面的权重"
                          "交替取各数据集的行，直到全部用完。"),
    "data.mix_weights": ("混合权重", "interleave：各数据集所占的行比例，按列出的顺序，例如 0.7, 0.3；留空：等比例。"),
    "finetuning": ("微调方式", "lora：训练一个小的适配器；full：更新所有权重。"),
    "lora.r": ("LoRA 秩", "低秩更新矩阵的秩。"),
    "lora.alpha": ("LoRA alpha", "更新的缩放系数（alpha / r）。通常取 2 × r。"),
    "lora.dropout": ("LoRA 随机丢弃", "LoRA 输入上的随机丢弃概率。0（PEFT 的默认值）时，强化学习运行可以合并适配器生成，并在更新时每个提示只读一次，两者都精确；0.05-0.1 可以给小的 SFT 数据集加正则。"),
    "lora.target_modules": ("目标模块", "要适配的模块名，用逗号分隔（例如 q_proj,v_proj），或 all-linear。"),
    "lora.use_dora": ("DoRA", "权重分解的 LoRA：把每个被适配权重的幅度与方向分开学习；在相同秩下通常更接近全量微调，约慢 20-30%。"),
    "lora.use_rslora": ("rsLoRA", "秩稳定的 LoRA：用 alpha / √r 而不是 alpha / r 缩放更新，使高秩（32 及以上）仍能学习。"),
    "learning_rate": ("学习率", "峰值学习率（LoRA：1e-4 到 5e-4；全量：1e-5 到 5e-5）。"),
    "max_steps": ("最大步数", "要训练的优化器步数；-1 表示按轮数训练。"),
    "num_train_epochs": ("轮数", "遍历数据集的次数（最大步数为 -1 时使用）。"),
    "per_device_train_batch_size": ("批大小", "每个设备每步的样本数。"),
    "gradient_accumulation_steps": ("梯度累积", "每次优化器更新前累加的微批次数。"),
    "max_length": ("最大长度", "每个样本的 token 数；更长的会被截断。"),
    "seed": ("随机种子", "用于数据顺序和初始化的随机种子。"),
    "precision": ("精度", "auto：CPU 上为 fp32（bf16 在 CPU 上约慢 12 倍），支持 bf16 的 GPU 上为 bf16，否则为 fp16。fp16 需要 GPU；"
                       "bf16 需要支持它的 GPU（Ampere 或更新）或 CPU。"),
    "gradient_checkpointing": ("梯度检查点", "激活检查点：在反向传播时重新计算激活值；更省内存，约慢 25%。"),
    "quantization": ("4 比特基座（QLoRA）", "4bit：以带双重量化的 4 比特 NF4（bitsandbytes）加载冻结的基座模型，并在其上以上面的精度训练"
                                       " LoRA 适配器：约为基座内存的四分之一。需要 CUDA GPU、`pip install bitsandbytes` 和 LoRA。"),
    "use_liger_kernel": ("Liger 内核", "Liger 的 Triton 内核（RMSNorm、RoPE、SwiGLU、融合线性交叉熵）：更少的 GPU 内存、更快的步骤。需要"
                                     " CUDA GPU 和 `pip install liger-kernel`。"),
    "packing": ("打包", "把多个短样本打包进同一个序列（SFT）。"),
    "padding_free": ("无填充", "把一个批次直接拼接而不填充（GPU 上需要 FlashAttention）。"),
    "group_by_length": ("按长度分组", "把长度相近的样本放在同一批：填充更少，在长度不一的数据上更快；顺序的随机性降低（SFT）。"),
    "auto_find_batch_size": ("自动寻找批大小", "GPU 显存不足时，把批大小减半后重试，而不是失败（梯度累积不变）。"),
    "lr_scheduler_type": ("学习率调度", "学习率在训练过程中如何变化。"),
    "warmup_steps": ("预热步数", "学习率线性预热的步数。"),
    "weight_decay": ("权重衰减", "AdamW 的权重衰减。"),
    "max_grad_norm": ("最大梯度范数", "梯度裁剪；0 表示关闭。"),
    "logging_steps": ("记录间隔", "每 N 步记录一次指标（实时曲线读取这些值）。"),
    "save_steps": ("检查点间隔", "每 N 步保存一个检查点（崩溃后可从它恢复）；-1：大约每完成 10% 保存一次；0：不保存，只保存最终适配器。"),
    "save_total_limit": ("保留检查点数", "只保留最新的 N 个检查点（更早的会被删除）；0 表示全部保留。"),
    "save_minutes": ("每隔几分钟保存检查点", "另外每隔 N 分钟（墙上时间）保存一个检查点（步长不均、机器可能被收回时有用）；0：只按步数保存。"),
    "auto_resume": ("自动恢复", "当工作进程意外终止（被杀死、崩溃；不包括停止，也不包括设置或数据被拒绝）且存在检查点时，自动从检查点恢复运行，"
                               "最多 N 次；0：关闭。"),
    "stall_action": ("训练进程停滞时", "没有进展的训练进程（超过其自身步时的 10 倍且至少 2 分钟没有完成一步，或进程被冻结：30 秒没有它"
                                 "自己的心跳）会被标记为停滞。warn：只标记；stop：结束运行（失败，并说明原因）；restart：结束训练进程并从最后一个"
                                 "检查点恢复。"),
    "stop_grace_s": ("停止宽限期（秒）", "停止会请求训练进程在下一步保存适配器并结束；如果这么多秒后仍未结束（卡在很长的一步或用户代码中），"
                                 "它的进程会被杀死：运行以“已停止”结束，不做这次保存，保留最后一个检查点。"),
    "report_to": ("同时报告到", "同时把训练器的日志写给 TensorBoard（运行文件夹中的事件文件）、trackio（工作区的 trackio 文件夹）、"
                            "MLflow（工作区的 `mlruns` 文件夹，或 MLFLOW_TRACKING_URI 指定的服务器）和/或 W&B"
                            "（离线，写在运行文件夹中，除非 WANDB_MODE=online）；MLflow 和 W&B 需先安装（`pip install "
                            "mlflow-skinny`、`pip install wandb`）。"),
    "num_processes": ("进程数", "本机上的训练进程数（每个 GPU 一个），通过 accelerate 启动。在 GPU 机器上，运行会占用这么多 GPU（另加"
                              " vLLM 服务器的），取编号最小的空闲 GPU；空闲 GPU 不够时在队列中等待。"),
    "distributed.strategy": ("并行方式", "ddp：每个进程一份完整模型；fsdp：权重、梯度和优化器状态分片（FSDP2，需 GPU）；deepspeed："
                                       "ZeRO（需 GPU，`pip install deepspeed`）。"),
    "distributed.zero_stage": ("ZeRO 阶段", "DeepSpeed：1 分片优化器状态，2 还分片梯度，3 还分片权重。"),
    "distributed.offload": ("卸载到 CPU", "fsdp / deepspeed：在两次使用之间把参数和优化器状态放在 CPU 内存中；能在 GPU 上放下更大的模型，"
                                       "但会变慢。"),
    "distributed.num_machines": ("机器数", "参与的机器（节点）数；每台运行相同的运行配置和各自的机器编号，由 0 号机器记录指标。"),
    "distributed.machine_rank": ("机器编号", "本机的编号，0 到机器数 - 1；0 是主机器。"),
    "distributed.main_process_ip": ("主机器地址", "0 号机器的 IP 或主机名，每台机器都要能访问到（仅多机时）。"),
    "distributed.main_process_port": ("主机器端口", "0 号机器上一个空闲的 TCP 端口，供各进程汇合。"),
    "distributed.accelerate_config": ("accelerate 配置文件", "可选：`accelerate config` 生成的 YAML，用于其他任何设置；它会取代上面的"
                                                           "设置，其进程数和机器数必须与本次运行一致。"),
    "dpo.beta": ("DPO beta", "策略可以离参考模型（不带适配器的模型）多远：越高越接近参考。常用 0.05 到 0.5。"),
    "dpo.loss_type": ("DPO 损失", "sigmoid：原始 DPO；ipo：平方损失，不易过拟合；hinge：SLiC；apo_zero / apo_down：以被选回答为锚；"
                               "其余为 TRL 的变体。"),
    "kto.beta": ("KTO beta", "策略可以离参考模型多远：越高越接近参考。"),
    "kto.desirable_weight": ("正例权重", "好样本（label 为 true）上损失的权重；好样本比坏样本少时调高它。"),
    "kto.undesirable_weight": ("负例权重", "坏样本（label 为 false）上损失的权重。"),
    "kto.loss_type": ("KTO 损失", "kto：用每个批次中错配的样本对估计 KL 项（批大小 ≥ 2）；apo_zero_unpaired：锚定式，无 KL 项。"),
    "orpo.beta": ("ORPO lambda", "在被选回答的 SFT 损失之外，优势比偏好项的权重（论文中的 λ，TRL 中的 beta）：越高越用力压低被拒回答。"
                                "常用 0.05 到 0.5。"),
    "cpo.beta": ("CPO beta", "损失中偏好差值的缩放（没有参考模型）：越高越陡。常用 0.05 到 0.5。"),
    "cpo.loss_type": ("CPO 损失", "sigmoid：CPO 论文的损失（去掉参考模型的 DPO 损失）；hinge：SLiC；ipo：对按长度平均的对数概率取平方损失。"
                               "SimPO 是单独的模式。"),
    "cpo.cpo_alpha": ("SFT 权重（alpha）", "加在偏好损失上的、被选回答的 SFT（负对数似然）损失的权重；0 只训练偏好。"),
    "simpo.beta": ("SimPO beta", "按长度归一化的奖励（回答的平均对数概率）的缩放；与 DPO 的 beta 不在同一量级：SimPO 论文用 2 及以上。"),
    "simpo.simpo_gamma": ("目标差值（gamma）", "被选回答的奖励至少要超出被拒回答这么多，损失才放松；与 beta 一起调（论文调的是 gamma / beta 之比）。"),
    "simpo.cpo_alpha": ("SFT 权重（alpha）", "被选回答上 SFT（负对数似然）损失的权重；0 即论文中的 SimPO，大于 0 即 CPO-SimPO。"),
    "rl.num_generations": ("每个提示的生成数", "每个提示采样的回答数（GRPO / RLOO：至少 2 个，相互比较打分；PPO：1 个即可）。批大小按回答"
                                          "计数：批大小 × 梯度累积 × 进程数必须是它的倍数。"),
    "rl.max_completion_length": ("最大生成长度", "每个回答生成的 token 数；生成占据了大部分步骤时间。"),
    "rl.temperature": ("温度", "采样温度：越高回答越多样。"),
    "rl.top_p": ("Top-p", "从累计概率达到该值的最小 token 集合中采样；1 保留全部。"),
    "rl.probe": ("奖励试探", "在第一步之前，用这些设置为几个提示各采样一组回答并用奖励来源打分：日志和运行页会说明什么会让运行学不到东西"
                          "（回答在长度上限处被截断、某个来源给所有回答相同的分、组内没有奖励差异）。stop：每个组都没有奖励差异的运行立即停止；"
                          "warn：只发出警告；off：不试探。"),
    "rl.beta": ("KL 系数（beta）", "偏离参考模型的惩罚。0 跳过参考模型的前向计算（更快）；0.01 到 0.05 让策略保持接近。"),
    "rl.loss_type": ("GRPO 损失", "token 损失如何平均。dapo：对整个批次的 token 平均（无长度偏差）；grpo：按序列平均（偏好短的正确回答）；"
                               "dr_grpo：除以常数；bnpo：对本地批次平均；cispo / sapo：更柔和的裁剪。"),
    "rl.epsilon": ("裁剪范围", "一次更新最多能让 token 的概率比移动多少（PPO 式裁剪；GSPO 的序列级比值需要约 3e-4）。"),
    "rl.epsilon_high": ("上裁剪范围", "clip-higher（DAPO：0.28）：更大的上界让获得奖励的低概率 token 上升得更快，保持探索；0：同裁剪范围。"),
    "rl.delta": ("双侧裁剪（delta）", "对优势为负的 token 的概率比也从上方加界（INTELLECT-2；应大于 1 + 裁剪范围，例如 4）；0：关闭。"),
    "rl.importance_sampling_level": ("重要性采样级别", "token：每个 token 一个概率比（GRPO）；sequence：每个回答一个，取其 token 的平均"
                                                  "（GSPO），长回答时更稳定。"),
    "rl.scale_rewards": ("奖励缩放", "优势除以组内奖励的标准差（GRPO）、批次内的标准差，或不缩放（Dr. GRPO：不偏向容易或困难的问题）。"),
    "rl.mask_truncated_completions": ("不计被截断的回答", "达到长度上限的回答不计入损失（DAPO）：被截断的回答不会因为没写完而受罚。"),
    "rl.top_entropy_quantile": ("高熵 token 比例", "只在每个回答中模型最不确定的这部分 token 上训练（“Beyond the 80/20 rule”：0.2）；"
                                               "1：全部 token。"),
    "rl.generation_backend": ("生成后端", "transformers：用训练中的模型生成（任何机器）；vllm：用 vLLM 生成（CUDA GPU，`pip install "
                                       "vllm`），长回答快得多；vLLM 尚未在工作台自己的测试中于硬件上运行过。"),
    "rl.shared_prompts": ("每个提示只读一次", "生成时每个不同的提示只预填充一次，更新时也只为它的所有补全运行一次（对数概率和梯度相同，仅有浮点舍入差异；补全较短时更新计算量少 2-5 倍）。训练时有随机丢弃、梯度检查点、FSDP / DeepSpeed 或 Liger 时自动不用。关闭：TRL 自己的路径。"),
    "rl.merged_generation": ("合并适配器生成", "生成时把 LoRA 适配器并入权重：每个适配层只做一次矩阵乘法而不是三次，更新时仍在未改动的权重上训练"
                                         "适配器。auto：在结果精确时启用（LoRA 随机丢弃为 0、无 DoRA、无 4-bit 基座、无 FSDP / "
                                         "DeepSpeed）；on：有 LoRA 随机丢弃时也启用（生成时不做随机丢弃）；off：通过适配器生成。"),
    "rl.vllm_mode": ("vLLM 部署方式", "colocate：vLLM 与训练器共用每块训练 GPU；server：一个 `trl vllm-serve` 进程使用自己的 GPU"
                                   "（rl.vllm_gpus），随运行启动和停止，运行在其余 GPU 上训练。"),
    "rl.vllm_gpus": ("vLLM 服务器 GPU 数", "server 模式：vLLM 服务器占用的 GPU 数（其张量并行大小；必须能整除模型的注意力头数）。"
                                       "1 块推理 + N 块训练：这里填 1，进程数填 N。"),
    "rl.vllm_server_host": ("vLLM 服务器地址", "server 模式：留空则由运行自己启动服务器（多机时在 0 号机器上；其他机器通过主机器地址访问）。"
                                           "否则为已在运行的 `trl vllm-serve` 的主机，例如在另一个节点上；此时运行不为它占用 GPU。"),
    "rl.vllm_server_port": ("vLLM 服务器端口", "server 模式：服务器的 HTTP 端口。运行在一台机器上启动的服务器从这里开始取下一个空闲端口，"
                                           "因此并行的运行不会冲突。"),
    "rl.vllm_gpu_memory_utilization": ("vLLM 显存占比", "vLLM 为权重和 KV 缓存预留的每块 vLLM GPU 显存比例；0：同机部署时为 0.3（其余"
                                                     "留给训练器），服务器独占的 GPU 上为 0.9。"),
    "ppo.gamma": ("折扣（gamma）", "回答内部后续奖励的折扣；1 在每个 token 上都完整计入最终得分（语言任务的常用设置）。"),
    "ppo.lam": ("GAE lambda", "广义优势估计：1 使用实际回报（方差更大），0 信任价值模型的估计（偏差更大）。"),
    "ppo.cliprange": ("策略裁剪范围", "相对采样策略的概率比最多可以变化多少，超过后损失不再奖励它。常用 0.1 到 0.3。"),
    "ppo.cliprange_value": ("价值裁剪范围", "每次更新中价值估计相对 rollout 时最多可以变化多少。"),
    "ppo.vf_coef": ("价值损失权重", "价值模型损失相对策略损失的权重。"),
    "ppo.num_ppo_epochs": ("PPO 轮数", "对每批 rollout 遍历的次数；一个训练步骤是一次 rollout 及其 PPO 轮次。"),
    "ppo.num_mini_batches": ("小批次数", "每个 PPO 轮次中的优化器步数。每个进程的 rollout 批次为 批大小 × 梯度累积 × 小批次数 个回答。"),
    "ppo.kl_coef": ("KL 系数", "每个 token 偏离参考模型（不带适配器的模型）的惩罚。0.01 到 0.2；自适应时为起始值。"),
    "ppo.adaptive_kl": ("自适应 KL", "每次 rollout 后调高或调低 KL 系数，使 KL 保持在目标附近（Ziegler 等，2019）。"),
    "ppo.target_kl": ("目标 KL", "使用自适应 KL 时：每个回答要保持在其附近的 KL（nats）。"),
    "ppo.horizon": ("KL 时间窗", "使用自适应 KL 时：系数最多变化 20% 所经历的回答数；越小适应越快。"),
    "ppo.whiten_rewards": ("奖励白化", "把每次 rollout 的逐 token 奖励缩放到单位方差（得分很大或漂移时有帮助）。"),
    "ppo.value_model": ("价值模型", "separate：模型的第二份拷贝，带自己的适配器和价值头（更稳定，内存翻倍）；shared：在策略自己的主干上加价值头"
                                 "（更省内存，价值损失也会训练策略的适配器）。"),
    "ppo.value_init_run": ("用奖励模型初始化价值模型", "留空：全新的价值头。或填同一基座模型上已完成的 rm 运行的 id（或奖励模型文件夹），"
                                                 "用它初始化价值模型（仅 separate 价值模型）。"),
    "ppo.missing_eos_penalty": ("缺少 EOS 惩罚", "从在最大生成长度处被截断的回答得分中扣除；0 表示关闭。"),
    "constraint.lambda_init": ("初始 λ", "开始时每个代价的乘子：在运行还没测量任何东西之前，一单位代价从奖励中扣掉多少。"),
    "constraint.lambda_lr": ("λ 学习率", "λ 每步移动的速度：λ += 速率 × (平均代价 − 预算)，不低于 0。越大对违规反应越快，振荡也越多。"),
    "constraint.lambda_max": ("λ 上限", "λ 能达到的最大值，使长时间的违规不会淹没奖励。"),
    "constraint.patience": ("超预算容忍步数", "代价可以连续超出预算多少步，之后日志发出警告（或按下一项停止运行）；0：从不。"),
    "constraint.stop": ("超预算时停止", "一旦代价连续超出预算达到容忍步数，就停止运行（与停止按钮相同），而不只是警告。"),
    "eval.dataset": ("评估数据集", "留空：无（或用训练集的一部分，见下项）。否则为与训练集形式和格式相同的数据集：内置集、文件、save_to_disk"
                                "文件夹或 labels:<session>。SFT、RM 和偏好模式（DPO、KTO、ORPO、CPO、SimPO）报告其上的损失；GRPO、RLOO 和 PPO 贪心地回答其中的提示，"
                                "并记录 eval_reward（奖励来源的加权和）和 eval_rewards/<source>/mean。"),
    "eval.split": ("留出比例", "没有评估数据集时：从训练集中留出用于评估的比例（例如 0.1），按运行的随机种子选取；0 不做评估。"),
    "eval.steps": ("评估间隔", "每 N 步以及结束时评估一次（记录为 eval_loss 等）；0 只在结束时评估。"),
    "eval.batch_size": ("评估批大小", "每个设备每个评估步骤的样本数；0 使用训练批大小（RL 模式：一起回答的提示数；0：训练批大小的四倍）。"),
    "eval.limit": ("评估提示数（生成）", "GRPO、RLOO、PPO，以及在评估时生成的 SFT 和偏好模式：每次评估回答的前 N 个留出提示；0：全部"
                                       "（每次评估都为每一个生成）。"),
    "eval.generate": ("评估时生成", "SFT 和偏好模式（DPO、KTO、ORPO、CPO、SimPO）：每次评估时也贪心地回答留出的提示（前 eval.limit 个）并给回答打分：与数据集给出的答案"
                                  "比较 ROUGE-L（SFT：completion 或最后一个助手轮次；DPO、ORPO、CPO、SimPO：chosen；KTO：标为好的回答），记录为 eval_rouge_l；"
                                  "如有奖励来源也用它们打分（eval_reward、eval_rewards/<source>/mean）。GRPO、RLOO 和 PPO 总是这样做；RM 不写"
                                  "回答（其评估为留出的 chosen 是否高于 rejected：eval_accuracy）。"),
    "eval.max_new_tokens": ("评估回答长度", "评估时生成（SFT 和偏好模式）：每个回答最多的 token 数。RL 模式的回答与训练时一样长"
                                         "（rl.max_completion_length）。"),
    "reward_sources": ("奖励来源", "RL 奖励来自哪里：一组来源（规则、奖励模型、嵌入相似度、多样性、工作区中的 Python 函数），各有权重；奖励是"
                                 "它们的加权和，再对每个 role: cost 且有预算的来源减去 λ × 代价。YAML：[{type: length, params: {target: 50}}, "
                                 "{type: regex, weight: 0.5, params: {pattern: '<answer>.*?</answer>'}}]。SFT 和偏好模式不从中学习：它们只给"
                                 "评估时生成的回答打分（eval.generate）。"),
}

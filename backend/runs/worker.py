"""The training process of one run, started by the supervisor through `accelerate launch -m backend.runs.worker`
(a single process: directly, or forked from a warm supervisor).

Every rank runs this; only the main process writes to the store.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from contextlib import nullcontext
from pathlib import Path

from backend.core.procs import Heartbeat, job_args
from backend.core.database import StoreFull
from backend.runs.store import RunStore

# Freeing a DDP model frees gloo's process group, whose threads may need the GIL the freeing thread holds: a
# rank can hang at exit forever. The trainer is kept until the process ends with os._exit, after everything
# (store rows, adapter) is written.
_KEEP_UNTIL_EXIT: list = []


def run(run_id: str, workspace: str) -> int:
    # accelerate launch / torchrun set RANK; building accelerate's state here would pre-empt the trainer's.
    is_main = int(os.environ.get("RANK", "0")) == 0  # writes metrics, samples and the adapter
    # this machine's first process keeps this machine's record of the run (pid, heartbeat, progress, outcome);
    # on a single machine it is the main process
    node_main = int(os.environ.get("LOCAL_RANK", "0")) == 0
    store = RunStore(workspace)
    if node_main:
        store.update_run(run_id, worker_pid=os.getpid())
        # SIGTERM asks for the same clean stop as the Stop button.
        signal.signal(signal.SIGTERM, lambda *_: store.request_stop(run_id))
    # the worker's own beat, apart from its supervisor's: a frozen worker goes stale under a live supervisor
    beat = Heartbeat(lambda: store.worker_heartbeat(run_id)) if node_main else nullcontext()
    with beat:  # until the outcome is stored: a finished worker must not look alive
        return _train(store, run_id, is_main, node_main)


def _resume(trainer, checkpoint: str, max_steps: int) -> None:
    """transformers' training loop resumed from a checkpoint of the last step trains one step more (it skips
    into the epoch and checks max_steps only after a step): a run killed after its last checkpoint only needs
    that checkpoint's weights. The project's PPO loop checks before each step."""
    from transformers import Trainer

    step = int(Path(checkpoint).name.rsplit("-", 1)[-1])
    if 0 < max_steps <= step and type(trainer).train is Trainer.train:
        print(f"checkpoint {step} is the last step of {max_steps}: nothing left to train", flush=True)
        trainer._load_from_checkpoint(checkpoint)
    else:
        trainer.train(resume_from_checkpoint=checkpoint)


def _disk_full(e: BaseException, folder) -> bool:
    # torch.save on a full disk says only "unexpected pos 576 vs 534": a failure that leaves the run's disk
    # nearly full is taken as the disk's
    if getattr(e, "errno", None) == errno.ENOSPC or any(
            text in str(e) for text in ("No space left on device", "StorageFull")):  # safetensors, tokenizers
        return True
    from backend.runs.preflight import disk_nearly_full

    return disk_nearly_full(folder)


def _refused(e: BaseException) -> bool:
    from backend.config import ConfigError
    from backend.data import DatasetError
    from backend.models import ModelError

    return isinstance(e, (ConfigError, DatasetError, ModelError))


def _say_suggestions(config, dataset, info, tokenizer) -> None:
    """What the data says of the run's settings (backend/doctor/defaults.py), in the log before the first step."""
    from backend.doctor.defaults import measure, suggestions
    from backend.doctor.texts import suggestion_text

    try:
        for s in suggestions(config, measure(config, dataset, info, tokenizer)):
            print(f"doctor: {suggestion_text(s.key, s.value, s.params)}", flush=True)
    except Exception as e:  # noqa: BLE001 - advice only: never a reason to stop the run
        print(f"doctor: the data's lengths were not measured ({type(e).__name__}: {e})", flush=True)


def sharded_weights(strategy: str, zero_stage: int | None, processes: int) -> str | None:
    """Why the in-run reward probe cannot run, or None. It generates on the main process alone while the others
    wait; weights sharded over several processes (FSDP, DeepSpeed ZeRO-3) need every rank in each forward, so the
    main process would wait for the others forever. `strategy`: distributed.strategy or accelerate's
    distributed type (FSDP, DEEPSPEED)."""
    if processes <= 1:
        return None
    if strategy.lower() == "fsdp":
        return f"FSDP shards the weights over {processes} processes"
    if strategy.lower() == "deepspeed" and zero_stage == 3:
        return f"DeepSpeed ZeRO-3 shards the weights over {processes} processes"
    return None


def _probe(trainer, ctx, is_main: bool, doctor) -> str | None:
    """The reward probe of an RL run's first attempt (rl.probe), on the model the trainer holds. Returns why the
    run stops before its first step (every probe group without reward spread, rl.probe: stop), else None; every
    rank gets the same answer."""
    from backend.doctor.live import log_lines
    from backend.modes.training import _broadcast_flag

    config = ctx.config
    if not config.spec.online_rl or config.rl.probe == "off":
        return None
    from backend.doctor.probe import not_probed

    if why := not_probed(config):
        if is_main:
            print(f"reward probe: skipped, {why}", flush=True)
        return None
    # the accelerator's state, not distributed.strategy: an accelerate config file replaces the run's settings
    state = trainer.accelerator.state
    plugin = state.deepspeed_plugin
    if sharded := sharded_weights(state.distributed_type.value, plugin and plugin.zero_stage, state.num_processes):
        if is_main:  # every rank decides the same from the same state, so none waits on a probe
            print(f"reward probe: skipped, {sharded} and the main process cannot generate alone; probe the rewards "
                  "before Start instead (`launch.py train --dry-run`, or Check rewards)", flush=True)
        return None
    why = None
    if is_main:
        from backend.doctor import describe, to_json
        from backend.doctor.probe import run_probe

        try:
            report = run_probe(getattr(trainer, "policy", None) or trainer.model, trainer.processing_class, config,
                               ctx.dataset, ctx.store.workspace, before_start=False)
        except Exception as e:  # noqa: BLE001 - the probe is advice: a failure of its own never stops the run
            traceback.print_exc()
            print(f"reward probe: skipped ({type(e).__name__}: {e})", flush=True)
        else:
            print(report.summary(), flush=True)
            for line in log_lines(report.diagnoses):
                print(line.replace("doctor:", "reward probe:", 1), flush=True)
            if doctor is not None:
                doctor.pin(report.diagnoses)
            ctx.store.update_run(ctx.run_id, diagnoses=to_json(report.diagnoses))
            if report.no_signal and config.rl.probe == "stop":
                first = next(d for d in report.diagnoses if d.no_signal)
                what, action = describe(first.check, first.params)
                others = [describe(d.check, d.params) for d in report.diagnoses if d is not first]
                why = f"reward probe: {what}; {action}" + "".join(f"; {w} ({a})" for w, a in others)
    if not _broadcast_flag(why is not None):
        return None
    return why or "stopped by the reward probe of the main process (its log says why)"


def _train(store: RunStore, run_id: str, is_main: bool, node_main: bool) -> int:
    record = store.get_run(run_id)
    config = record.config
    try:
        from backend.data import DataOptions, prepare_eval_dataset, reachable
        from backend.data.kept import prepare_kept
        from backend.models.from_run import training_model
        from backend.modes import mode_module
        from transformers import PrinterCallback

        from backend.modes.training import StoreCallback, TrainContext, evaluate_at_end

        print(f"run {run_id}: mode={config.mode} model={config.model} dataset={config.dataset}", flush=True)
        model_path = training_model(config.model, store.workspace,
                                    progress=lambda f, m: print(f"[model {f:.0%}] {m}", flush=True))
        dataset, info = prepare_kept(config.dataset, config.mode, store.workspace, DataOptions.of(config))
        e = config.eval
        dataset, eval_dataset = prepare_eval_dataset(e.dataset, e.split, config.seed, config.mode, dataset,
                                                     workspace=store.workspace, options=DataOptions.of(config))
        dataset, cut = reachable(dataset, config.reachable_rows(), config.seed)
        if cut and is_main:
            print(cut, flush=True)
        print(f"dataset: {info.summary(rows=len(dataset))}", flush=True)
        if eval_dataset is not None:
            where = e.dataset or f"{e.split:g} of the training set, held out with seed {config.seed}"
            print(f"evaluation: {len(eval_dataset)} rows ({where}), "
                  + (f"every {e.steps} steps and at the end" if e.steps else "at the end"), flush=True)
        ctx = TrainContext(config=config, run_id=run_id, run_dir=store.run_dir(run_id), store=store,
                           model_path=model_path, dataset=dataset, eval_dataset=eval_dataset)
        d = config.distributed
        if is_main and d.num_machines > 1:  # the processes meet while the trainer is built: say who is awaited
            config_file = store.run_dir(run_id) / "config.yaml"
            print(f"waiting for machines 1-{d.num_machines - 1} at {d.main_process_ip}:{d.main_process_port}; on "
                  f"machine K run: python launch.py train {config_file} --set distributed.machine_rank=K", flush=True)
        trainer = mode_module(config.mode).build_trainer(ctx)
        _KEEP_UNTIL_EXIT.append(trainer)
        state = trainer.accelerator.state
        if is_main:
            print(f"processes: {state.num_processes} ({state.distributed_type.value}, "
                  f"{config.distributed.num_machines} machine(s))", flush=True)
        callback = StoreCallback(store, run_id, is_main, node_main)
        if node_main and not is_main:
            print(f"machine {config.distributed.machine_rank} of {config.distributed.num_machines}: metrics, "
                  f"samples and the adapter are recorded on machine 0", flush=True)
        trainer.add_callback(callback)
        if config.save_minutes:
            from backend.modes.training import WallClockSave

            trainer.add_callback(WallClockSave(config.save_minutes))
        from backend.modes.generation_eval import add_generation_eval

        add_generation_eval(trainer, ctx)  # RL runs, and sft / dpo / kto with eval.generate
        trainer.remove_callback(PrinterCallback)  # StoreCallback prints each log line with its step
        doctor = None
        if is_main:
            from backend.doctor.live import DoctorCallback

            _say_suggestions(config, dataset, info, trainer.processing_class)  # the trainer's tokenizer, loaded
            doctor = DoctorCallback(store, run_id, config)
            trainer.add_callback(doctor)
        from backend.runs.checkpoints import resume_checkpoint
        from backend.runs.supervisor import EXIT_REPEATS

        checkpoint = resume_checkpoint(store, record)
        if checkpoint is None and (why := _probe(trainer, ctx, is_main, doctor)):
            if node_main:
                store.finish_run(run_id, "failed", error=why, exit_code=EXIT_REPEATS)
                store.update_run(run_id, verdict="no_signal")
            print(f"run {run_id} stopped before its first step: {why}", flush=True)
            return EXIT_REPEATS
        if checkpoint:
            print(f"attempt {record.attempt}: resuming from {checkpoint}", flush=True)
            _resume(trainer, checkpoint, config.max_steps)
        else:
            trainer.train()
        evaluate_at_end(trainer, ctx, stopped=callback.stopped)
        trainer.save_model(str(ctx.adapter_dir))
        if is_main:
            trainer.processing_class.save_pretrained(str(ctx.adapter_dir))
            store.update_run(run_id, adapter_path=str(ctx.adapter_dir))
        if doctor is not None:
            if doctor.finish() and not callback.stopped:
                print("doctor: the run completed without a learning signal (see the diagnoses above)", flush=True)
        if node_main:
            status = "stopped" if callback.stopped else "completed"
            store.finish_run(run_id, status)
            print(f"run {run_id} {status}" + (f"; adapter saved to {ctx.adapter_dir}" if is_main else ""), flush=True)
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure must reach the store
        try:
            traceback.print_exc()
        except OSError:  # the log's disk is full: the store still says how the run ended
            pass
        from backend.runs.preflight import disk_full_message
        from backend.runs.supervisor import EXIT_REPEATS

        full = _disk_full(e, store.run_dir(run_id))
        code = EXIT_REPEATS if full or _refused(e) else 1  # the supervisor never auto-resumes EXIT_REPEATS
        if node_main:
            why = "writing the run store failed" if isinstance(e, StoreFull) else f"{type(e).__name__}: {e}"
            if full:
                why = disk_full_message(store, run_id, why)
            store.finish_run(run_id, "failed", error=why, exit_code=code)
        return code
    finally:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def warm(workspace: str) -> int:
    """A warm supervisor (backend/runs/warm.py): import what a run needs, wait for a run, supervise it, forking
    the worker from this process."""
    import time

    from backend.runs import warm as pool

    t0, code, parent = time.monotonic(), pool.fingerprint(os.environ), os.getppid()
    from accelerate.commands import launch  # noqa: F401 - its environment is computed here

    from backend.modes import generation_eval, mode_module, training  # noqa: F401
    from backend.core.mode_registry import MODES

    for mode in MODES:
        mode_module(mode)
    print(f"warm process {os.getpid()}: ready in {time.monotonic() - t0:.1f} s", flush=True)
    run_id = pool.wait_for_run(workspace, code, parent)
    if run_id is None:
        print(f"warm process {os.getpid()}: not needed, ending", flush=True)
        return 0
    from backend.runs.logs import log_path
    from backend.runs.supervisor import supervise

    log = os.open(log_path(RunStore(workspace), run_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd in (1, 2):  # from here on this is the run's supervisor: its output goes to the run's log
        os.dup2(log, fd)
    os.close(log)
    return supervise(run_id, workspace, fork=run)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--warm"]:
        return warm(job_args("A warm supervisor waiting for the next run.", ["-", *argv[1:]])[1])
    if argv[:1] == ["--direct"]:  # a single process started without accelerate's launcher (supervisor.direct_command)
        run_id, workspace = job_args("Train one single-process run, as accelerate launch would.", argv[1:])
        from backend.runs.supervisor import launch_command
        from backend.runs.warm import launcher_env

        import torch

        config = RunStore(workspace).get_run(run_id).config
        os.environ.update(launcher_env(launch_command(config, run_id, Path(workspace))))
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads())))  # set late
        return run(run_id, workspace)
    return run(*job_args("Train one run of the workbench (started by the supervisor).", argv))


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point: see there

    load_providers()
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # the log's disk is full: end all the same (a normal shutdown may hang, see above)
            pass
    os._exit(code)

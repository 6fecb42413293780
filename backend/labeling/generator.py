"""Generating a labeling session's answers in the background, ahead of the labelers.

One detached process per session (`python -m backend.labeling.generator SESSION --workspace DIR`, started in
its own session like a run's supervisor), not a thread in the UI process, because:
- it outlives a UI restart or a closed terminal, and a UI crash never takes half-done generation with it;
- the UI process never holds model weights for labeling, so it stays responsive for every browser;
- the UI and the CLI re-attach the same way: the store has the generator's pid and heartbeat, and
  `ensure_generator` starts one whenever a session has prompts without answers and no live generator.
  What was generated is committed item by item (a batch's items as soon as the batch ends), so a generator that
  died (crash, reboot) is simply started again and carries on with the items still marked 'new'.
There is one generator per session: a start is claimed in an IMMEDIATE transaction, and a generator that
finds another live one for its session exits. It stays at most `lookahead` items ahead of the labelers (0:
it generates every item) and exits after IDLE_EXIT_S with nothing to do; the UI's poll starts it again once
the labelers catch up, so an abandoned session does not keep a CPU busy.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from backend import labeling
from backend.core.procs import Heartbeat, is_dead, job_args, pid_alive, spawn_detached
from backend.labeling import LabelError, LabelSession
from backend.runs.store import RunStore

IDLE_EXIT_S = 120.0
BATCH = 8  # items generated together: one batched pass costs far less than eight single ones


def log_path(store: RunStore, session_id: str) -> Path:
    return store.workspace / "labels" / f"{session_id}.log"


def generator_alive(session: LabelSession, now: float | None = None) -> bool:
    return not is_dead(session.gen_pid, session.gen_heartbeat_at, session.gen_started_at, now=now)


def ensure_generator(store: RunStore, session_id: str, retry: bool = False) -> str:
    """Start the session's generator if answers are missing and none runs. Returns what it found:
    'running', 'started', 'waiting' (far enough ahead of the labelers), 'done' or 'failed' (retry=True
    starts a failed session again)."""
    session = labeling.get_session(store, session_id)
    if session.status == "failed" and not retry:
        return "failed"
    if not labeling.has_ungenerated(store, session_id):
        if session.status != "ready":
            labeling.update_session(store, session_id, status="ready", error=None,
                                    gen_message="Every answer is generated")
        return "done"
    if generator_alive(session):
        return "running"
    if not labeling.next_to_generate(store, session_id):
        if session.status == "failed":
            labeling.update_session(store, session_id, status="generating", error=None)
        return "waiting"
    now = time.time()
    with store.transaction() as db:
        row = db.execute("SELECT * FROM label_sessions WHERE id=?", (session_id,)).fetchone()
        if generator_alive(labeling.session_from_row(row), now):
            return "running"  # another UI or CLI started it meanwhile
        db.execute("UPDATE label_sessions SET gen_pid=NULL, gen_started_at=?, gen_heartbeat_at=NULL, "
                   "status='generating', error=NULL, gen_message='Starting the generator' WHERE id=?",
                   (now, session_id))
    pid = _spawn(store, session_id)
    with store.connect() as db:
        db.execute("UPDATE label_sessions SET gen_pid=? WHERE id=? AND gen_pid IS NULL", (pid, session_id))
    return "started"


def _spawn(store: RunStore, session_id: str) -> int:
    return spawn_detached(["-m", "backend.labeling.generator", session_id, "--workspace", str(store.workspace)],
                          log_path(store, session_id)).pid


def stop_generator(store: RunStore, session_id: str, wait_s: float = 10.0) -> bool:
    """Stop the session's generator (it is started again by the next `ensure_generator`). True if one ran."""
    import signal

    session = labeling.get_session(store, session_id)
    pid = session.gen_pid
    if not pid or not pid_alive(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    end = time.time() + wait_s
    while pid_alive(pid) and time.time() < end:
        time.sleep(0.1)
    if pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    with store.connect() as db:
        db.execute("UPDATE label_sessions SET gen_pid=NULL, gen_heartbeat_at=NULL, gen_started_at=NULL, "
                   "gen_message='Generation stopped' WHERE id=? AND gen_pid=?", (session_id, pid))
    return True


# ---- what generates ----

@dataclass
class Candidate:
    number: int  # 1 or 2: the candidate's place before the per-item swap
    spec: str  # as the user chose it: a model spec or run:<id>
    base: str  # the model to load
    adapter: str | None  # a PEFT adapter folder on top of it
    temperature: float
    label: str  # how the summary names it


def candidates(store: RunStore, session: LabelSession) -> list[Candidate]:
    s = session.settings
    if session.mode == "single":
        specs = [(session.model_a, s.temperature_a)]
    else:
        specs = [(session.model_a, s.temperature_a), (session.model_b or session.model_a, s.temperature_b)]
    out = []
    for n, (spec, temperature) in enumerate(specs, 1):
        base, adapter = labeling.resolve_candidate(store, spec)
        out.append(Candidate(n, spec, base, adapter, float(temperature), labeling.describe_model(store, spec)))
    if len(out) == 2 and out[0].label == out[1].label:
        same_t = out[0].temperature == out[1].temperature
        for c in out:
            c.label += f" · sample {c.number}" if same_t else f" · T={c.temperature:g}"
    return out


class CandidateModels:
    """Each base model loaded once; adapters of the same base go on it as named PEFT adapters, and the base
    side of a base-vs-trained comparison runs with the adapters disabled (no second copy of the weights). An
    adapter's side generates with it folded into the weights (`merge`; bench/label_speed.py measures it). With
    `play`, every tokenizer gets its chat template and answers go through the tool loop; each is stored as its
    exchange turn by turn (backend/rewards/trajectory.py), which the Labeling tab shows as turns."""

    def __init__(self, cands: list[Candidate], report=lambda message: None, merge: bool = True,
                 play: labeling.ToolPlay | None = None, workspace: Path | None = None):
        from backend.models import load_causal_lm, load_tokenizer, resolve_model

        self.merge, self.play, self.tools = merge, play, []
        self.loaded: dict[str, tuple] = {}
        self.adapter_names: dict[str, str] = {}
        if play is not None:
            from backend.tools import build_tools

            report(f"Answering with the tools of {play.run_name}: {', '.join(t.name for t in play.tools)}")
            self.tools = build_tools(play.tools, workspace)
        bases = list(dict.fromkeys(c.base for c in cands))
        for i, base in enumerate(bases, 1):
            report(f"Loading {base} ({i}/{len(bases)})")
            path = resolve_model(base, lambda f, m: report(m))
            tokenizer = load_tokenizer(path)
            if play is not None:
                from backend.data.templates import MODEL_TEMPLATE, template_text, use_tool_parser

                if play.chat_template != MODEL_TEMPLATE:
                    tokenizer.chat_template = template_text(play.chat_template)
                use_tool_parser(tokenizer, play.chat_template)
            model = load_causal_lm(path)
            for adapter in dict.fromkeys(c.adapter for c in cands if c.base == base and c.adapter):
                from peft import PeftModel

                name = f"adapter{len(self.adapter_names) + 1}"
                report(f"Loading the adapter {Path(adapter).parent.name}")
                if isinstance(model, PeftModel):
                    model.load_adapter(adapter, adapter_name=name)
                else:
                    model = PeftModel.from_pretrained(model, adapter, adapter_name=name)
                self.adapter_names[adapter] = name
            model.eval()
            self.loaded[base] = (model, tokenizer)

    def generate(self, cand: Candidate, prompts: list, *, seed: int, max_new_tokens: int, top_p: float,
                 num: int = 1) -> list[list[str]]:
        """`num` answers to each prompt (chat template when the tokenizer has one), all in one left-padded batch."""
        from backend.evals.generate import generate_answers
        from backend.evals.spec import Generation
        from backend.models.load import LoadedModel
        from backend.models.merged import merged_lora

        model, tokenizer = self.loaded[cand.base]
        context = nullcontext()
        if cand.adapter:
            model.set_adapter(self.adapter_names[cand.adapter])
            if self.merge:
                context = merged_lora(model)  # one product per layer, not three; the base side's weights untouched
        elif hasattr(model, "disable_adapter"):
            context = model.disable_adapter()
        sample = cand.temperature > 0
        settings = Generation(do_sample=sample, temperature=cand.temperature if sample else 1.0, top_p=top_p,
                              samples=num if sample else 1, max_new_tokens=max_new_tokens,
                              batch_size=len(prompts), seed=seed)
        answers: list[list[str]] = [[] for _ in prompts]
        loaded = LoadedModel(None, model, tokenizer, str(model.device))
        if self.play is not None:
            from backend.evals.generate import answers_with_tools
            from backend.rewards.trajectory import trajectory_text

            batches = ((idx, [[trajectory_text(a) for a in k] for k in outs]) for idx, outs, _ in
                       answers_with_tools(loaded, prompts, settings, self.tools, self.play.turns))
        else:
            batches = generate_answers(loaded, prompts, settings)
        with context:
            for idx, outs in batches:
                for i, out in zip(idx, outs):
                    answers[i] = out if sample else out * num  # greedy: one answer is every answer
        return answers


def generate_items(models: CandidateModels, cands: list[Candidate], session: LabelSession,
                   items: list[labeling.LabelItem]) -> list[list[tuple[str, dict]]]:
    """[(answer, source)] in candidate order for each item. A candidate answers every item in one batched call;
    two samples of one model at one temperature come from the same call."""
    s = session.settings
    seed = (s.seed + items[0].idx * 7919) % (2**31 - 2)  # room for + candidate number, within a seed's range
    prompts = [item.prompt for item in items]
    common = dict(max_new_tokens=s.max_new_tokens, top_p=s.top_p)

    def source(c: Candidate, seed_used: int) -> dict:
        # one seed drew the whole batch: `batch` is how many items were generated together
        return {"candidate": c.number, "model": c.spec, "base": c.base, "adapter": c.adapter,
                "temperature": c.temperature, "top_p": s.top_p, "seed": seed_used, "batch": len(items),
                "max_new_tokens": s.max_new_tokens, "label": c.label,
                **({"tools": [t.name for t in models.play.tools]} if models.play else {})}

    if len(cands) == 2 and (cands[0].spec, cands[0].temperature) == (cands[1].spec, cands[1].temperature):
        texts = models.generate(cands[0], prompts, seed=seed, num=2, **common)
        return [[(t[0], source(cands[0], seed)), (t[1], source(cands[1], seed))] for t in texts]
    per_cand = [[(t[0], source(c, seed + c.number)) for t in models.generate(c, prompts, seed=seed + c.number,
                                                                              **common)] for c in cands]
    return [list(answers) for answers in zip(*per_cand)]


# ---- the process ----

def run_generator(store: RunStore, session_id: str, idle_exit_s: float = IDLE_EXIT_S) -> int:
    """Generate the session's missing answers (as far as the lookahead allows); 0 when it ended cleanly."""
    me = os.getpid()
    now = time.time()
    with store.transaction() as db:
        row = db.execute("SELECT * FROM label_sessions WHERE id=?", (session_id,)).fetchone()
        if row is None:
            print(f"no labeling session {session_id}", flush=True)
            return 2
        session = labeling.session_from_row(row)
        if session.gen_pid not in (None, me) and generator_alive(session, now):
            print(f"another generator (pid {session.gen_pid}) serves session {session_id}", flush=True)
            return 0
        db.execute("UPDATE label_sessions SET gen_pid=?, gen_heartbeat_at=?, gen_started_at=?, status='generating', "
                   "error=NULL WHERE id=?", (me, now, now, session_id))
    replaced = threading.Event()

    def beat():
        with store.connect() as db:
            if db.execute("UPDATE label_sessions SET gen_heartbeat_at=? WHERE id=? AND gen_pid=?",
                          (time.time(), session_id, me)).rowcount == 0:
                replaced.set()  # stopped, or another generator took over

    def say(message: str) -> None:
        print(message, flush=True)
        labeling.update_session(store, session_id, gen_message=message[:300])

    heartbeat = Heartbeat(beat).start()
    rc = 0
    try:
        session = labeling.get_session(store, session_id)
        cands = candidates(store, session)
        models = None
        idle_since = None
        while not replaced.is_set():
            # the first item alone, so the labelers see it at once; then a batch (one pass answers them all)
            items = labeling.next_to_generate(store, session_id, 1 if models is None else BATCH)
            if not items:
                if not labeling.has_ungenerated(store, session_id):
                    break
                p = labeling.progress(store, session_id)
                if idle_since is None:
                    idle_since = time.time()
                    say(f"Paused: {p.ready_ahead} ready ahead of the labelers ({p.generated}/{p.total} generated)")
                if time.time() - idle_since > idle_exit_s:
                    break
                time.sleep(1.0)
                continue
            idle_since = None
            if models is None:
                models = CandidateModels(cands, say, play=labeling.tool_play(store, [c.spec for c in cands]),
                                         workspace=store.workspace)
            if len(items) > 1:
                say(f"Generating {len(items)} items together")
            for item, answers in zip(items, generate_items(models, cands, session, items)):
                swapped = session.mode == "pair" and labeling.swap_for(session_id, item.idx)
                labeling.save_answers(store, item.id, answers, swapped)
            p = labeling.progress(store, session_id)
            say(f"Generated {p.generated}/{p.total}")
        if not labeling.has_ungenerated(store, session_id):
            labeling.update_session(store, session_id, status="ready", gen_message="Every answer is generated")
    except BaseException as e:  # noqa: BLE001 - the store must say why generation stopped
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}"
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            labeling.update_session(store, session_id, gen_message="Generation stopped")
        else:
            labeling.update_session(store, session_id, status="failed", error=message[:2000],
                                    gen_message="Generation failed")
        rc = 1
    finally:
        heartbeat.stop()
        with store.connect() as db:
            db.execute("UPDATE label_sessions SET gen_pid=NULL, gen_heartbeat_at=NULL, gen_started_at=NULL "
                       "WHERE id=? AND gen_pid=?", (session_id, me))
    return rc


def main(argv=None) -> int:
    import signal

    session_id, workspace = job_args("Generate a labeling session's answers (started by the workbench).", argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop between two answers; the item stays 'new'
    try:
        return run_generator(RunStore(workspace), session_id)
    except LabelError as e:
        print(e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    from backend.workspace import load_providers  # a process's entry point: see there

    load_providers()
    sys.exit(main())

"""Preference labeling: sessions of prompts with generated answers, labels committed one by one, and exports
that the DPO, reward-model and KTO trainers load as they are.

A session holds its prompts as items. A background generator (`generator.py`) fills each item's
answers ahead of the labelers; a labeler claims the next ready item, labels it, and the label is committed
in that same call. Every read-then-write runs in one IMMEDIATE transaction, so labelers in several browsers
(or processes) never claim the same item and never write a label twice:

- a *client* is one browser (or API caller) and labels as an *annotator* name;
- `claim_next` gives a client its own open assignment first (so a reload resumes on the same item), else
  the first ready item that still needs labels (`labels_per_item`, default 1) and has none from this
  client or annotator, counting other clients' fresh assignments as taken; an assignment older than
  STALE_ASSIGNMENT_S can be given to someone else;
- `commit_label` is idempotent per (item, client): a second key press for an item already labeled from
  that browser changes nothing (a partial unique index on labels enforces it as well);
- `undo_last` marks the client's last label undone and assigns its item back to that client.

Answers are stored as shown: `answer_a` is the left answer (A). `swapped` says the second candidate (model
B, or the second sample) is shown as A; `source_a` / `source_b` record which model, adapter, temperature
and seed made each, so the summary can say how often each model won. No torch here.

Modules: `records` (the stored records and limits), `prompts`, `candidates` (the models compared),
`sessions` (sessions, claims, labels, the generator's bookkeeping), `export` (training data and the
`labels:` dataset source), `summary`, `store` (its tables, registered with the run store) and
`generator` (the detached process that writes answers).
"""

from backend.labeling import store as _store  # noqa: F401 - registers the label tables with the run store
from backend.labeling.candidates import (ToolPlay, adapter_choices, check_candidate, describe_model,
                                         resolve_candidate, tool_play)
from backend.labeling.export import (dataset_choices, export_format_for_mode, export_rows, labels_dataset,
                                     write_export)
from backend.labeling.prompts import load_prompts, split_typed_prompts
from backend.labeling.records import (CHOICE_NAMES, EXPORT_FORMATS, LABELS_PREFIX, MAX_NOTE, MAX_PROMPTS, MODES,
                                      PAIR_CHOICES, PROMPT_FILE_TYPES, SINGLE_CHOICES, STALE_ASSIGNMENT_S,
                                      ExportSummary, GenerationSettings, Label, LabelError, LabelItem,
                                      LabelSession, SessionProgress, new_session_id, prompt_text,
                                      session_from_row)
from backend.labeling.sessions import (CommitResult, claim_next, client_label_count, commit_label, create_session,
                                       get_item, get_session, has_ungenerated, items, labels, list_sessions,
                                       next_to_generate, progress, save_answers, swap_for, undo_last,
                                       update_session)
from backend.labeling.summary import LabelSummary, label_counts, rate, session_counts, summarize

__all__ = [
    "CHOICE_NAMES", "EXPORT_FORMATS", "LABELS_PREFIX", "MAX_NOTE", "MAX_PROMPTS", "MODES", "PAIR_CHOICES",
    "PROMPT_FILE_TYPES", "SINGLE_CHOICES", "STALE_ASSIGNMENT_S", "CommitResult", "ExportSummary",
    "GenerationSettings", "Label", "LabelError", "LabelItem", "LabelSession", "LabelSummary", "SessionProgress",
    "adapter_choices", "check_candidate", "claim_next", "client_label_count", "commit_label", "create_session",
    "dataset_choices", "describe_model", "export_format_for_mode", "export_rows", "get_item", "get_session",
    "has_ungenerated", "items", "label_counts", "labels", "labels_dataset", "list_sessions", "load_prompts", "new_session_id",
    "next_to_generate", "progress", "prompt_text", "rate", "resolve_candidate", "save_answers", "session_counts",
    "session_from_row", "split_typed_prompts", "summarize", "swap_for", "tool_play", "ToolPlay", "undo_last",
    "update_session", "write_export",
]

"""labels list, labels export: preference labeling sessions and the datasets made from them."""
from __future__ import annotations

from backend.labeling.records import EXPORT_FORMATS
from cli.common import bad_input, open_store, print_json, print_table


def add_parsers(sub, common) -> None:
    lb = sub.add_parser("labels", parents=[common], help="preference labeling sessions: list, export")
    lsub = lb.add_subparsers(dest="labels_command", required=True)
    ll = lsub.add_parser("list", parents=[common], help="sessions with their label counts")
    ll.add_argument("--json", action="store_true")
    ll.set_defaults(func=cmd_labels)
    le = lsub.add_parser("export", parents=[common], help="export a session's labels as a training dataset")
    le.add_argument("session_id")
    le.add_argument("--format", choices=list(EXPORT_FORMATS), default="dpo",
                    help="dpo: prompt/chosen/rejected (DPO and reward models); kto: prompt/completion/label; sft: "
                         "prompt/completion of the preferred answers; cost: chosen/rejected pairs with the answer "
                         "tagged unsafe chosen (train mode rm on it for a cost classifier)")
    le.add_argument("--out", required=True, help="output file, .jsonl or .parquet")
    le.add_argument("--plain", action="store_true", help="plain strings instead of chat messages")
    le.add_argument("--ties", choices=["drop", "keep"], default="drop", help="kto: keep ties as two good answers")
    le.add_argument("--both-bad", choices=["drop", "keep"], default="drop",
                    help="kto: keep both-bad as two bad answers; dpo: pairs with the labeler's edited answer")
    le.set_defaults(func=cmd_labels)


def cmd_labels(args) -> int:
    from backend import labeling

    store = open_store(args)
    if args.labels_command == "export":
        try:
            summary = labeling.write_export(store, args.session_id, args.out, fmt=args.format,
                                            conversational=not args.plain, ties=args.ties, both_bad=args.both_bad)
        except labeling.LabelError as e:
            return bad_input(e)
        print(f"{summary.path}: {summary.text()}")
        return 0
    sessions = [labeling.session_counts(store, s) for s in labeling.list_sessions(store)]
    if args.json:
        print_json(sessions)
        return 0
    if not sessions:
        print("no labeling sessions yet")
        return 0
    print_table("{:26} {:28} {:6} {:>6} {:>9} {:>10}  {}",
                ("id", "name", "mode", "labels", "remaining", "generated", "status"),
                [(s["id"], s["name"][:28], s["mode"], s["labels"], s["remaining"],
                  f"{s['generated']}/{s['items']}", s["status"]) for s in sessions])
    return 0

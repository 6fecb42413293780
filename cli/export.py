"""export, push: a run's adapter or merged model as a folder with a model card, optionally zipped, or uploaded to
the Hugging Face Hub."""
from __future__ import annotations

from cli.common import bad_input, open_store


def add_parsers(sub, common) -> None:
    from backend.gguf_export import QUANT_TYPES  # numpy only: the parser stays quick
    from backend.models.from_run import MERGED_DTYPES

    ex = sub.add_parser("export", parents=[common], help="export a run's adapter or merged model, with a model card")
    ex.add_argument("run_id")
    ex.add_argument("--out", required=True, help="folder to write (created; must be empty or an earlier export)")
    ex.add_argument("--merge", action="store_true",
                    help="fold the LoRA adapter into the base weights (a model for plain AutoModelForCausalLM)")
    ex.add_argument("--dtype", default="auto", choices=list(MERGED_DTYPES),
                    help="the merged model's weights (with --merge): auto keeps the base's own dtype")
    ex.add_argument("--format", choices=["adapter", "merged", "gguf"],
                    help="adapter (default), merged (as --merge), or gguf: the merged model as one GGUF file for "
                         "llama.cpp / Ollama / LM Studio, with an Ollama Modelfile")
    ex.add_argument("--quant", default="f16",
                    help=f"the GGUF's type (with --format gguf): {', '.join(QUANT_TYPES)}; k-quants need llama.cpp's "
                         "compiled quantizer")
    ex.add_argument("--zip", action="store_true", help="also write OUT.zip")
    ex.add_argument("--overwrite", action="store_true", help="replace an earlier export in OUT")
    ex.set_defaults(func=cmd_export)
    pu = sub.add_parser("push", parents=[common], help="upload a run's adapter or merged model to the Hugging Face Hub")
    pu.add_argument("run_id")
    pu.add_argument("--repo", required=True, help="the Hub repo to create or update, user/name")
    pu.add_argument("--merged", action="store_true", help="the merged model instead of the adapter")
    pu.add_argument("--dtype", default="auto", choices=list(MERGED_DTYPES), help="the merged model's weights")
    pu.add_argument("--private", action="store_true", help="create the repo private")
    pu.add_argument("--dry-run", action="store_true",
                    help="only write the folder that would be uploaded (workspace/exports/RUN-push-KIND)")
    pu.set_defaults(func=cmd_push)


def cmd_push(args) -> int:
    from backend.export import ExportError, push_run

    try:
        result = push_run(open_store(args), args.run_id, args.repo, merge=args.merged, dtype=args.dtype,
                          private=args.private, dry_run=args.dry_run)
    except ExportError as e:
        return bad_input(f"Cannot push: {e}")
    if result.url is None:
        print(f"dry run: {result.folder} is what `push` would upload to {result.repo_id}")
    else:
        print(f"pushed {result.folder} to {result.url}")
    return 0


def cmd_export(args) -> int:
    from backend.export import ExportError, export_run

    last = {"message": None, "tenth": -1}

    def progress(fraction: float, message: str) -> None:
        # one line per step, and per tenth within a long one (zipping a merged model reports every 8 MB)
        step = message.split(" (")[0]
        tenth = int(fraction * 10)
        if step != last["message"] or tenth != last["tenth"]:
            print(f"[{fraction:4.0%}] {message}", flush=True)
            last.update(message=step, tenth=tenth)

    try:
        result = export_run(open_store(args), args.run_id, args.out, merge=args.merge or args.format == "merged",
                            make_zip=args.zip, overwrite=args.overwrite, progress=progress, dtype=args.dtype,
                            gguf=args.quant if args.format == "gguf" else None)
    except ExportError as e:
        return bad_input(f"Cannot export: {e}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"{result.kind}: {result.folder}")
    if result.zip_path:
        print(f"zip: {result.zip_path}")
    return 0

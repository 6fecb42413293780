"""Datasets: loading a spec (built-in set, file, save_to_disk folder, Hub id, or a registered source such as
`labels:<session>`), detecting its format for a training mode, and checking every row before a run starts, so
a bad row fails in the form, not at step 300. Errors name the file, the row (1-based) and the column, and say
what was expected.
"""
from backend.data.common import DatasetError
from backend.data.formats import FormatInfo, detect_format, validate_rows
from backend.data.options import DataOptions
from backend.data.prepare import (GenerationRows, generation_rows, hold_out, prepare_dataset, prepare_eval_dataset,
                                  preview, reachable, reachable_note, split_answer)
from backend.data.sources import (BUILTIN_DATASETS, DATA_DIR, FILE_TYPES, load_dataset_spec, pinned_spec,
                                  register_source, save_upload)

__all__ = ["BUILTIN_DATASETS", "DATA_DIR", "FILE_TYPES", "DataOptions", "DatasetError", "FormatInfo", "GenerationRows",
           "detect_format", "generation_rows", "hold_out", "load_dataset_spec", "pinned_spec", "prepare_dataset",
           "prepare_eval_dataset", "preview", "reachable", "reachable_note", "register_source", "save_upload",
           "split_answer", "validate_rows"]

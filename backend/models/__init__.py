"""Models: naming them (`ModelRef`), the base-model specs behind names (`specs`), loading (`load`) and the
process's bounded cache of loaded models (`cache`). Nothing here imports torch until a model loads."""
from backend.models.specs import (EMBEDDED_GGUF, EMBEDDED_MODEL, EMBEDDED_PACKAGE, MARKER, ModelError, Progress,
                                  build_once, build_tiny_model, check_model, embedded_gguf, is_complete, is_hub_id,
                                  local_folder, model_cache_dir, resolve_model, unknown_modules,
                                  weight_module_names)
from backend.models.ref import (ADAPTER_FILES, CARD_TAG, RUN_PREFIX, ModelRef, RunArtifact, is_export, run_part,
                                saved_model)
from backend.models.load import (LoadedModel, default_device, load_causal_lm, load_model, load_reward_model,
                                 load_sequence_classifier, load_tokenizer)
from backend.models.cache import MODELS, ModelCache, cached_model, free_memory, model_key

__all__ = ["EMBEDDED_GGUF", "EMBEDDED_MODEL", "EMBEDDED_PACKAGE", "MARKER", "ModelError", "Progress", "build_once",
           "build_tiny_model", "check_model", "embedded_gguf", "is_complete", "is_hub_id", "model_cache_dir",
           "resolve_model", "local_folder", "unknown_modules", "weight_module_names", "ADAPTER_FILES", "CARD_TAG", "RUN_PREFIX", "is_export", "ModelRef", "RunArtifact", "run_part", "saved_model",
           "LoadedModel", "default_device", "load_causal_lm", "load_model", "load_reward_model",
           "load_sequence_classifier", "load_tokenizer", "MODELS", "ModelCache", "cached_model", "free_memory",
           "model_key"]

"""A finished run as a run leaves it (a LoRA adapter and its tokenizer in runs/<id>/adapter), made without
training: for tests of what is done with a run's result (serving, exporting)."""


def adapter_run(store, model, weights=None, **settings):
    """`model` as the run config names it; `weights`: the folder it loads from when that is not `model` (the
    embedded model's cache folder)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.config import build_config

    run = store.create_run(build_config({"model": str(model), "max_steps": 1, **settings}))
    torch.manual_seed(0)
    weights = weights or model
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(weights),
                          LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft.save_pretrained(store.run_dir(run.id) / "adapter")
    AutoTokenizer.from_pretrained(weights).save_pretrained(store.run_dir(run.id) / "adapter")
    store.update_run(run.id, adapter_path=str(store.run_dir(run.id) / "adapter"))
    store.finish_run(run.id, "completed")
    return store.get_run(run.id)

"""A sampling profiler for bench runs, loaded into every Python process started with this folder on PYTHONPATH
and STACK_SAMPLES set to a folder: a daemon thread looks at the main thread's stack every 10 ms and, every
2 s, writes how often each function was on it while the trainer's loop ran to STACK_SAMPLES/<pid>.json (no atexit: the worker ends with
os._exit). bench/gpu_check.py --profile compares the workbench's worker with the bare TRL script this way.
"""
import os

if os.environ.get("STACK_SAMPLES"):
    import collections
    import json
    import sys
    import threading
    import time

    def _sample(folder: str, main_id: int) -> None:
        counts: collections.Counter = collections.Counter()
        total, last_write = 0, time.monotonic()
        path = os.path.join(folder, f"{os.getpid()}.json")
        while True:
            time.sleep(0.01)
            frame = sys._current_frames().get(main_id)
            stack = set()  # a recursive function counts once per sample
            while frame is not None:
                code = frame.f_code
                stack.add(f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}")
                frame = frame.f_back
            if any(key.endswith(":_inner_training_loop") for key in stack):
                counts.update(stack)
                total += 1
            if time.monotonic() - last_write > 2:
                last_write = time.monotonic()
                with open(path + ".tmp", "w") as f:
                    json.dump({"argv": sys.argv, "samples": total, "counts": counts.most_common(400)}, f)
                os.replace(path + ".tmp", path)

    threading.Thread(target=_sample, args=(os.environ["STACK_SAMPLES"], threading.main_thread().ident),
                     daemon=True, name="stack-sampler").start()

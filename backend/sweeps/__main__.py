"""`python -m backend.sweeps drive ID --workspace DIR`: the detached driver, as `driver._spawn_driver` starts it."""
import sys

from backend.sweeps.driver import main
from backend.workspace import load_providers  # a process's entry point: see there

load_providers()
sys.exit(main())

"""`python -m backend.sweeps drive ID --workspace DIR`: the detached driver, as `driver._spawn_driver` starts it."""
import sys

from backend.sweeps.driver import main

sys.exit(main())

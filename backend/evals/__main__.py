import sys

from backend.evals.job import main
from backend.workspace import load_providers  # a process's entry point: see there

load_providers()
sys.exit(main())

"""Per-browser-session view state shared by the live panels: what each component was last sent, so a poll
sends gr.skip() instead of the same value again."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SentValues:
    shown: dict = field(default_factory=dict)

    def changed(self, key: str, value) -> bool:
        """True (and remembered) when `value` differs from what was last sent for `key`."""
        if key in self.shown and self.shown[key] == value:
            return False
        self.shown[key] = value
        return True

"""The shipped alerting rules (docs/prometheus/alerts.yml) are valid and fire where they should: promtool, from
Debian's `prometheus` package (scripts/setup.sh --dev installs it), checks them and runs their unit tests."""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's `prometheus` "
                                    "package ships it; scripts/setup.sh --dev installs it)")


def promtool(*args) -> str:
    done = subprocess.run([PROMTOOL, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@needs_promtool
def test_the_rules_file_is_valid_and_has_the_four_alerts():
    assert "SUCCESS: 4 rules found" in promtool("check", "rules", "docs/prometheus/alerts.yml")


@needs_promtool
def test_each_alert_fires_on_its_series_and_only_there():
    assert "SUCCESS" in promtool("test", "rules", "tests/unit/prometheus/alerts_test.yml")


def test_every_alert_has_a_firing_and_a_silent_case():
    import yaml

    rules = yaml.safe_load((REPO / "docs/prometheus/alerts.yml").read_text())
    tests = yaml.safe_load((REPO / "tests/unit/prometheus/alerts_test.yml").read_text())
    alerts = {r["alert"] for group in rules["groups"] for r in group["rules"]}
    cases = [c for t in tests["tests"] for c in t["alert_rule_test"]]
    for alert in alerts:
        assert any(c["alertname"] == alert and c.get("exp_alerts") for c in cases), f"{alert} never fires"
        assert any(c["alertname"] == alert and not c.get("exp_alerts") for c in cases), f"{alert} never stays silent"

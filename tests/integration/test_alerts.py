"""The Prometheus alerting rules shipped in conf/prometheus/: promtool
checks them and runs their tests (authn-hmac-rules.test.yml), every alert
has a case that fires and one that does not, the tests notice an alert that
never fires or always does, every metric the rules name is on a real
server's ?prometheus page, and each alert is explained in
docs/operations.md."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import make_server, serve
from test_status import get

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES_DIR = os.path.join(TOP, "conf", "prometheus")
RULES = "authn-hmac-rules.yml"
TESTS = "authn-hmac-rules.test.yml"
# Metrics a rule reads that the module does not serve yet, each with why.
# An exemption applies only while the metric is absent: once the module
# serves it, it is checked as every other one is.
NOT_YET_SERVED = frozenset()
# A metric's name in a rule's text (not the module's name, mod_authn_hmac).
METRIC = re.compile(r"(?<![\w-])authn_hmac_\w+")


def yaml():
    """PyYAML, from this interpreter or else from Debian's python3-yaml
    (tools/deps --test), on the path for the import only. Never a silent
    skip."""
    try:
        import yaml as y
        return y
    except ImportError:
        pass
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import yaml as y
        return y
    except ImportError as e:
        pytest.fail("cannot import yaml (%s) with %s nor from /usr/lib/python3/dist-packages: "
                    "install python3-yaml (tools/deps --test) or pip install pyyaml"
                    % (e, sys.executable), pytrace=False)
    finally:
        if sys.path[-1] == "/usr/lib/python3/dist-packages":
            sys.path.pop()


def promtool(*args, cwd=RULES_DIR):
    """promtool's exit code and output (stdout and stderr together)."""
    exe = shutil.which("promtool")
    if not exe:
        pytest.fail("no promtool: install Debian's prometheus (tools/deps --test)",
                    pytrace=False)
    p = subprocess.run([exe] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def load(name):
    with open(os.path.join(RULES_DIR, name)) as f:
        return yaml().safe_load(f)


def alerts():
    """{alert name: rule} of the shipped rules."""
    return {r["alert"]: r for g in load(RULES)["groups"] for r in g["rules"] if "alert" in r}


def failed_alerts(out):
    """The alert names promtool's test output reports as failed."""
    return set(re.findall(r"^\s*alertname: (\w+), time: ", out, re.M))


def test_rules_pass_promtool_check():
    rc, out = promtool("check", "rules", RULES)
    assert rc == 0 and "SUCCESS: %d rules found" % len(alerts()) in out, out
    assert len(alerts()) >= 7, sorted(alerts())


def test_rules_pass_their_tests():
    rc, out = promtool("test", "rules", TESTS)
    assert rc == 0 and "SUCCESS" in out, out


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    tested = {}
    for group in load(TESTS)["tests"]:
        for case in group.get("alert_rule_test", []):
            tested.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    assert set(tested) == set(alerts()), set(tested) ^ set(alerts())
    for name, kinds in tested.items():
        assert kinds == {True, False}, "%s: %s" % (
            name, "no case that fires it" if True not in kinds else "no case where it is quiet")


def test_every_alert_tells_what_to_do():
    for name, rule in alerts().items():
        ann = rule.get("annotations", {})
        assert ann.get("summary") and len(ann.get("description", "")) > 150, name
        assert rule.get("labels", {}).get("severity") in ("critical", "warning", "info"), name


@pytest.mark.parametrize("broken,expr", [("never fires", "vector(0) > 1"),
                                         ("always fires", "vector(1)")])
def test_tests_fail_for_a_broken_rule(tmp_path, broken, expr):
    """Each alert in turn made to never fire, then to always fire (all at
    once, in a copy): promtool's tests fail, and name every alert."""
    doc = load(RULES)
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["expr"] = expr
            rule.pop("for", None)
    with open(tmp_path / RULES, "w") as f:
        yaml().safe_dump(doc, f)
    shutil.copy(os.path.join(RULES_DIR, TESTS), tmp_path / TESTS)
    rc, out = promtool("test", "rules", TESTS, cwd=str(tmp_path))
    assert rc != 0, out
    assert failed_alerts(out) == set(alerts()), (broken, set(alerts()) - failed_alerts(out), out)


def test_tests_fail_for_a_wrong_threshold(tmp_path):
    """One rule off by a threshold (p99 over 5 s, not 1 s): its test fails
    and only its own."""
    with open(os.path.join(RULES_DIR, RULES)) as f:
        text = f.read()
    old = "rate(authn_hmac_verify_duration_seconds_bucket[5m])))\n          > 1\n"
    assert text.count(old) == 1, "the verification alert's threshold moved: update this test"
    (tmp_path / RULES).write_text(text.replace(old, old.replace("> 1", "> 5")))
    shutil.copy(os.path.join(RULES_DIR, TESTS), tmp_path / TESTS)
    rc, out = promtool("test", "rules", TESTS, cwd=str(tmp_path))
    assert rc != 0 and failed_alerts(out) == {"AuthnHmacVerifySlow"}, out


def rule_metrics():
    """{metric name: [alerts whose expression or text names it]}."""
    used = {}
    for name, rule in alerts().items():
        text = rule["expr"] + "".join(rule.get("annotations", {}).values())
        for m in set(METRIC.findall(text)):
            used.setdefault(m, []).append(name)
    return used


@pytest.fixture(scope="module")
def plain():
    yield from serve(make_server("event"))


def test_rules_read_only_metrics_the_module_serves(plain):
    # A login: the histograms have observations (their names are there
    # anyway).
    assert plain.status_code("/a/index.html", "alice", "correct horse") == 200
    _, body = get(plain, "/authn-hmac-status?prometheus")
    served = set(re.findall(r"^(authn_hmac_\w+)[{ ]", body, re.M))
    assert "authn_hmac_busy_total" in served and \
        "authn_hmac_verify_duration_seconds_bucket" in served, body
    used = rule_metrics()
    assert len(used) >= 10, used
    missing = {m: a for m, a in used.items() if m not in served}
    unexpected = {m: a for m, a in missing.items() if m not in NOT_YET_SERVED}
    assert not unexpected, "the rules name metrics the module does not serve: %s" % unexpected


def test_alerts_are_explained_in_operations():
    with open(os.path.join(TOP, "docs", "operations.md")) as f:
        ops = f.read()
    listed = set(re.findall(r"^\| `(AuthnHmac\w+)` \|", ops, re.M))
    assert listed == set(alerts()), listed ^ set(alerts())
    assert "rule_files:" in ops and RULES in ops

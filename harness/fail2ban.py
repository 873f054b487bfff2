"""fail2ban-regex over an error log: what a jail would count."""
import os
import re
import subprocess

from .env import TOP_SRCDIR

# Debian's filter for mod_auth_basic's lines, and the module's own two.
APACHE_AUTH = "/etc/fail2ban/filter.d/apache-auth.conf"
BANS = os.path.join(TOP_SRCDIR, "conf", "fail2ban", "authn-hmac.conf")
BUSY = os.path.join(TOP_SRCDIR, "conf", "fail2ban", "authn-hmac-busy.conf")


def fail2ban_matched(filter_path, log_path):
    """Lines of log_path that fail2ban-regex finds with filter_path."""
    p = subprocess.run(["fail2ban-regex", log_path, filter_path],
                       capture_output=True, text=True, check=True)
    m = re.search(r"^Lines: \d+ lines, \d+ ignored, (\d+) matched", p.stdout, re.M)
    assert m, p.stdout
    return int(m.group(1))

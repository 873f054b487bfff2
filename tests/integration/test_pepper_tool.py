"""tools/authn-hmac-pepper makes a pepper that AuthHMACPepperFile accepts,
and never replaces an existing file."""
import os
import stat
import subprocess

import pytest

from harness import Httpd

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("top_srcdir") or os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(SRC, "tools", "authn-hmac-pepper")


def tool(*args):
    return subprocess.run([TOOL] + list(args), capture_output=True, text=True)


@pytest.fixture
def srv():
    s = Httpd(name="pepper_tool")
    yield s
    s.cleanup()


def test_pepper_is_accepted_by_the_module(srv):
    path = srv.path("made.pepper")
    p = tool(path)
    assert p.returncode == 0, p.stderr
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid() and st.st_size == 32
    # Nothing else is left in the directory (the temporary file is gone).
    assert sorted(n for n in os.listdir(srv.dir) if "pepper" in n) == ["made.pepper"]
    srv.global_conf = "AuthHMACPepperFile %s" % path
    srv.write_config()
    rc, out = srv.configtest()
    assert rc == 0, out


def test_bytes_option(srv):
    path = srv.path("big.pepper")
    assert tool("--bytes", "1024", path).returncode == 0
    assert os.path.getsize(path) == 1024
    with open(path, "rb") as f:
        assert len(set(f.read())) > 100  # random, not a constant fill
    for bad in ("31", "1025", "x", "", "99999999999999999999"):
        p = tool("--bytes", bad, srv.path("bad.pepper"))
        assert p.returncode != 0 and "32 to 1024" in p.stderr, (bad, p.stderr)
        assert not os.path.lexists(srv.path("bad.pepper"))


def test_existing_file_is_never_replaced(srv):
    path = srv.path("kept.pepper")
    with open(path, "wb") as f:
        f.write(b"k" * 40)
    p = tool(path)
    assert p.returncode != 0
    assert "exists; not replacing it" in p.stderr and path in p.stderr
    with open(path, "rb") as f:
        assert f.read() == b"k" * 40
    # A dangling symbolic link is not followed to make its target.
    link, target = srv.path("link.pepper"), srv.path("target")
    os.symlink(target, link)
    p = tool(link)
    assert p.returncode != 0 and "not replacing" in p.stderr
    assert not os.path.lexists(target)


def test_missing_directory_and_help(srv):
    p = tool(srv.path("no", "such.pepper"))
    assert p.returncode != 0 and "no directory" in p.stderr
    p = tool("--help")
    assert p.returncode == 0 and p.stdout.startswith("Usage: authn-hmac-pepper")
    p = tool("--frobnicate")
    assert p.returncode != 0 and "unknown option" in p.stderr


def test_directory_others_may_write_is_refused(srv):
    """Others who may write the directory could swap names under the tool
    (found by review): refused, unless the directory is sticky, as /tmp."""
    d = srv.path("open")
    os.mkdir(d)
    os.chmod(d, 0o777)
    p = tool(os.path.join(d, "p"))
    assert p.returncode != 0 and "writable by group or others" in p.stderr, p.stderr
    assert os.listdir(d) == []
    os.chmod(d, 0o1777)
    p = tool(os.path.join(d, "p"))
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(os.stat(os.path.join(d, "p")).st_mode) == 0o600

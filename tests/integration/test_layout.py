"""tools/layout, which `make lint` runs: the tree passes, and each rule
fails on a copy of the tree that breaks it (no httpd here)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = os.path.join(ROOT, "tools", "layout")


def layout(root):
    r = subprocess.run([LAYOUT, root], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout


@pytest.fixture
def tree(tmp_path):
    """A copy of the code that tools/layout reads (src/, the glue, the C tests)."""
    dst = tmp_path / "tree"
    shutil.copytree(os.path.join(ROOT, "src"), dst / "src")
    shutil.copytree(os.path.join(ROOT, "tests", "unit"), dst / "tests" / "unit")
    for name in os.listdir(ROOT):
        if name.startswith("mod_authn_hmac") and name.endswith((".c", ".h")):
            shutil.copy(os.path.join(ROOT, name), dst / name)
    return dst


def test_the_tree_has_the_layout_it_claims():
    rc, out = layout(ROOT)
    assert rc == 0 and out == "", out


def append(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def test_an_include_up_a_layer_fails(tree):
    assert layout(str(tree)) == (0, "")
    append(tree / "src" / "core" / "util.c", '#include "shm/table.h"\n')
    rc, out = layout(str(tree))
    assert rc == 1
    assert "src/core/util.c: includes shm/table.h: core/ may use no other layer" in out


def test_redis_on_the_shared_segment_fails(tree):
    append(tree / "src" / "redis" / "pool.c", '#include "shm/table.h"\n')
    rc, out = layout(str(tree))
    assert rc == 1 and "src/redis/pool.c: includes shm/table.h: redis/ may use core" in out


def test_a_long_file_and_a_long_function_fail(tree):
    body = "".join("    x += %d;\n" % i for i in range(81))
    append(tree / "src" / "core" / "secret.c",
           "int layout_long(int x);\nint layout_long(int x)\n{\n" + body + "    return x;\n}\n"
           + "/* filler */\n" * 900)
    rc, out = layout(str(tree))
    assert rc == 1
    assert "src/core/secret.c:" in out and "layout_long() is 84 lines (at most 80)" in out
    assert "lines (at most 900)" in out


def test_a_circle_fails(tree):
    (tree / "src" / "core" / "a.h").write_text('#include "core/b.h"\n')
    (tree / "src" / "core" / "b.h").write_text('#include "core/a.h"\n')
    rc, out = layout(str(tree))
    assert rc == 1 and "circle: " in out and "src/core/a.h" in out


def test_a_glue_header_included_for_nothing_fails(tree):
    status_h = [n for n in os.listdir(tree) if n == "mod_authn_hmac_status.h"]
    assert status_h, "the glue has a header per concern"
    path = tree / "mod_authn_hmac_provider.c"
    text = path.read_text()
    first = text.index('#include "mod_authn_hmac')
    path.write_text(text[:first] + '#include "mod_authn_hmac_status.h"\n' + text[first:])
    rc, out = layout(str(tree))
    assert rc == 1 and "mod_authn_hmac_provider.c" in out and "mod_authn_hmac_status.h" in out

"""The reference pages say what the code does: every directive has its
section in docs/directives.md with the .htaccess context the code allows,
and every log tag is used once and listed in docs/operations.md."""
import os
import re

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(*p):
    with open(os.path.join(TOP, *p)) as f:
        return f.read()


def test_every_directive_is_documented_with_its_context():
    code = read("mod_authn_hmac.c")
    names = dict(re.findall(r'#define (D_\w+) +"(AuthHMAC\w+)"', code))
    table = code[code.index("static const command_rec cmds[]"):]
    table = table[:table.index("{NULL, {NULL}")]
    entries = re.findall(r"AP_INIT_\w+\(\s*(D_\w+),.*?,\s*((?:(?:RSRC_CONF|ACCESS_CONF|OR_\w+)"
                         r"(?:\s*\|\s*)?)+),", table, re.S)
    assert len(entries) == len(names) == 15, (entries, names)
    doc = read("docs", "directives.md")
    for macro, flags in entries:
        name = names[macro]
        m = re.search(r"^## %s\n(.*?)(?=^## )" % name, doc, re.M | re.S)
        assert m, "no section for " + name
        context = re.search(r"^\| Context \| (.*) \|$", m.group(1), re.M).group(1)
        assert ("OR_AUTHCFG" in flags) == (".htaccess" in context), (name, flags, context)
        if "OR_AUTHCFG" in flags:
            assert re.search(r"^\| Override \| AuthConfig \|$", m.group(1), re.M), name


def test_every_log_tag_is_used_once_and_listed():
    used = re.findall(r"AHMAC\d{4}", read("mod_authn_hmac.c") + "".join(
        read("src", f) for f in sorted(os.listdir(os.path.join(TOP, "src")))
        if f.endswith(".c")))
    assert len(used) >= 17 and len(used) == len(set(used)), sorted(used)
    ops = read("docs", "operations.md")
    listed = set(re.findall(r"^\| `(AHMAC\d{4})` \|", ops, re.M))
    assert listed == set(used), set(used) ^ listed


def test_no_status_page_example_admits_local_clients():
    """Every example of the status page, shipped or documented, lets in a
    scraper's address, never `Require local`: behind a reverse proxy on the
    same host every client is local, and the counters tell unknown names
    from wrong passwords."""
    files = [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(TOP, "docs")))]
    files += ["README.md", os.path.join("conf", "authn_hmac.conf"),
              os.path.join("conf", "mediawiki-vhost.conf.example")]
    seen = 0
    for name in files:
        for block in re.findall(r"<Location /authn-hmac-status>(.*?)</Location>",
                                read(name), re.S):
            seen += 1
            assert "Require local" not in block, (name, block)
            assert re.search(r"Require ip ", block), (name, block)
    assert seen >= 6, seen

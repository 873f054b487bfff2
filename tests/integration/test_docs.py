"""The reference pages say what the code does: every directive of the
command table has its entry in docs/directives.md, with the Syntax, Default
and Context the code gives it, and a line in the summary table; every log
tag is used once, listed in docs/operations.md, and no page names another;
links between the pages reach their anchors; every ```apache block passes
httpd -t."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(*p):
    with open(os.path.join(TOP, *p)) as f:
        return f.read()


def read_glue(ext):
    """The module's glue files (mod_authn_hmac*.c, or .h), in one text."""
    return "".join(read(f) for f in sorted(os.listdir(TOP))
                   if f.startswith("mod_authn_hmac") and f.endswith(ext))


# ----------------------------------------------------------------------
# docs/directives.md against the command table: each directive's entry has
# the Syntax its argument kind takes, the Default the code sets and the
# Context its flags and handler allow; each entry names a directive the
# module has; the summary table at the top says what the entries say.

ARGS = {  # the AP_INIT_ kind: (required arguments, optional ones, repeats)
    "TAKE1": (1, 0, False), "TAKE12": (1, 1, False), "FLAG": (1, 0, False),
    "ITERATE": (1, 0, True), "RAW_ARGS": (1, 0, False),
}
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400,
         "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# Where each default lives in the code: a #define of the glue (or of src/),
# read here; a C expression of it is evaluated. A directive absent here has
# no default value in the code (a prose default, "none" or a computed one,
# checked below).
DEFAULT_MACROS = {
    "AuthHMACCacheTTL": "DEFAULT_TTL",
    "AuthHMACCacheMaxAge": "DEFAULT_MAX_AGE",
    "AuthHMACNegativeTTL": "DEFAULT_NEGATIVE_TTL",
    "AuthHMACCacheSize": "DEFAULT_SIZE",
    "AuthHMACRedisTimeout": "DEFAULT_REDIS_TIMEOUT_MS",
    "AuthHMACRedisPrefix": "DEFAULT_REDIS_PREFIX",
    "AuthHMACMaxFailures": "DEFAULT_MAX_FAILURES",
    "AuthHMACMaxClientFailures": "DEFAULT_MAX_CLIENT_FAILURES",
    "AuthHMACFailureWindow": "DEFAULT_FAILURE_WINDOW",
    "AuthHMACBanTime": "DEFAULT_BAN_TIME",
    "AuthHMACOfflineGrace": "DEFAULT_OFFLINE_GRACE",
}
# A default the code gives where the value is used (a NULL setting's
# stand-in): the regular expression's group is the value.
DEFAULT_CODE = {
    "AuthHMACUserDBMType": r'c->dbm_type \? c->dbm_type : "(\w+)"',
}


def code_text():
    src = "".join(read(d, f) for d, _, files in sorted(os.walk(os.path.join(TOP, "src")))
                  for f in sorted(files) if f.endswith((".c", ".h")))
    return read_glue(".h") + read_glue(".c") + src


def macro(code, name):
    """The value of #define name: a string, or a number (a C integer
    expression of other macros, evaluated)."""
    m = re.search(r"^#define %s\s+(.+?)\s*(?:/\*.*)?$" % name, code, re.M)
    assert m, "no #define " + name
    v = m.group(1).strip()
    if v.startswith('"'):
        return v.strip('"')
    v = re.sub(r"\(\w+_t\)|\b(\d+)[uUlL]+\b", lambda g: g.group(1) or "", v)
    v = re.sub(r"\b[A-Z_][A-Z0-9_]+\b", lambda g: str(macro(code, g.group(0))), v)
    return int(eval(v, {"__builtins__": {}}))


def command_table():
    """[(name, kind, handler, flags)] of hmac_cmds[], in its order."""
    code = read_glue(".h") + read_glue(".c")
    names = dict(re.findall(r'#define (D_\w+) +"(AuthHMAC\w+)"', code))
    table = code[code.index("command_rec hmac_cmds[] = {"):]
    table = table[:table.index("{NULL, {NULL}")]
    rows = re.findall(r"AP_INIT_(\w+)\(\s*(D_\w+),\s*(\w+),.*?,\s*((?:(?:RSRC_CONF|ACCESS_CONF|OR_\w+)"
                      r"(?:\s*\|\s*)?)+),\s*((?:\"(?:[^\"\\\\]|\\\\.)*\"|\s|D_\w+|DURATION)+)\)",
                      table, re.S)
    assert len(rows) == len(names) == 33, (rows, names)
    out = []
    for kind, d, handler, flags, help_ in rows:
        help_ = re.sub(r"\bD_\w+\b", lambda g: '"%s"' % names[g.group(0)], help_)
        help_ = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', help_))
        out.append((names[d], kind, handler, flags, help_))
    return out


def context_of(handler, flags):
    """The Context the flags allow, as httpd's pages write it; a handler that
    refuses <VirtualHost> (GLOBAL_ONLY) makes RSRC_CONF the main server's."""
    code = read_glue(".c")
    m = re.search(r"^static const char \*%s\(.*?^}" % handler, code, re.M | re.S)
    global_only = bool(m) and "GLOBAL_ONLY" in m.group(0)
    ctx = []
    if "RSRC_CONF" in flags:
        ctx += ["server config"] + ([] if global_only else ["virtual host"])
    if "ACCESS_CONF" in flags:
        ctx.append("directory")
    if "OR_AUTHCFG" in flags:
        ctx.append(".htaccess")
    return ", ".join(ctx)


def doc_entries():
    """{name: (its table's rows, the text below the table)} of directives.md."""
    doc = read("docs", "directives.md")
    out = {}
    for m in re.finditer(r"^## (AuthHMAC\w+)\n(.*?)(?=^## |\Z)", doc, re.M | re.S):
        rows = dict(re.findall(r"^\| (\w+) \| (.*) \|$", m.group(2), re.M))
        out[m.group(1)] = (rows, m.group(2))
    return out


def doc_value(text, kind):
    """A documented default's value: seconds, bytes, a number or a word."""
    m = re.fullmatch(r"(\d+)([smhdKMG]?)", text)
    if m and kind in ("duration", "size"):
        return int(m.group(1)) * UNITS[m.group(2)]
    return int(text) if text.isdigit() else text


def test_every_directive_is_documented_with_its_context():
    """Each directive of the command table has its entry, whose Context is
    what its flags and handler allow (.htaccess where OR_AUTHCFG, with the
    Override AuthConfig), and each entry is a directive the module has."""
    table = command_table()
    entries = doc_entries()
    assert set(entries) == {name for name, *_ in table}, \
        set(entries) ^ {name for name, *_ in table}
    for name, kind, handler, flags, _ in table:
        rows = entries[name][0]
        assert rows.get("Context") == context_of(handler, flags), (name, rows.get("Context"))
        if "OR_AUTHCFG" in flags:
            assert rows.get("Override") == "AuthConfig", name
        for row in ("Description", "Syntax", "Default", "Status", "Module"):
            assert rows.get(row), (name, row)


def test_every_directive_syntax_matches_its_arguments():
    """The Syntax row takes the arguments the AP_INIT_ kind does: TAKE1 one,
    TAKE12 one and an optional [second], FLAG On|Off, ITERATE one or more."""
    entries = doc_entries()
    for name, kind, *_ in command_table():
        syntax = re.fullmatch(r"`(.*)`", entries[name][0]["Syntax"]).group(1)
        words = syntax.replace(" \\| ", "|").replace("\\|", "|").split()
        assert words[0] == name, (name, syntax)
        args = words[1:]
        if kind == "FLAG":
            assert args == ["On|Off"], (name, syntax)
            continue
        need, opt, repeat = ARGS[kind]
        if repeat and args[-1:] == ["..."]:
            args = args[:-1]
        required = [a for a in args if not a.startswith("[")]
        optional = [a for a in args if a.startswith("[") and a.endswith("]")
                    and not re.match(r"\[\w+\]:", a)]
        assert len(required) == need and len(required) + len(optional) == len(args), \
            (name, kind, syntax)
        assert len(optional) == (1 if repeat else opt), (name, kind, syntax)


def test_every_default_is_the_codes():
    """The Default row is `Directive value` with the value the code sets (a
    #define, read from the code), or a prose default where the code computes
    it or has none; and the command table's help says the same default."""
    code = code_text()
    entries = doc_entries()
    kinds = {"set_ttl": "duration", "set_throttle_time": "duration", "set_size": "size"}
    for name, kind, handler, flags, help_ in command_table():
        default = entries[name][0]["Default"]
        m = re.match(r"`%s (\S+)`" % name, default)
        said = re.search(r"\(default:? ((?:[^;,):]|:(?!\s))+)|(\S+) \(default\)", help_)
        said = said and (said.group(1) or said.group(2))
        if name in DEFAULT_MACROS:
            want = macro(code, DEFAULT_MACROS[name])
            k = kinds.get(handler, "number")
            # The macro is what the configuration records start from.
            assert re.search(r"= (?:apr_time_from_sec\()?%s\b" % DEFAULT_MACROS[name], code), name
            assert m, (name, default)
            assert doc_value(m.group(1), k) == want, (name, default, want)
            assert said and doc_value(said, k) == want, (name, help_, want)
        elif kind == "FLAG":
            assert m and m.group(1) in ("On", "Off"), (name, default)
            assert said == m.group(1), (name, help_, default)
        elif name in DEFAULT_CODE:
            # A default the code gives where the value is used.
            want = re.search(DEFAULT_CODE[name], code)
            assert want and m and m.group(1) == want.group(1), (name, default)
        elif m:
            # A value that lives in no #define: the help says it too.
            assert said == m.group(1), (name, help_, default)
        else:
            assert not said or said.split()[0] in default, (name, help_, default)
    # Defaults the code computes or takes from elsewhere.
    assert "half the CPU cores" in entries["AuthHMACMaxVerifications"][0]["Default"]
    per = int(re.search(r"hmac_conf\.backlog = (\d+) \* hmac_conf\.max_verifications",
                        code).group(1))
    assert "%d per `AuthHMACMaxVerifications`" % per in \
        entries["AuthHMACVerifyBacklog"][0]["Default"]
    wrapped = macro(code, "WRAPPED_MAX_AGE")
    m = re.search(r"`(\d+[smhd]?)` in a section with \[AuthHMACProvider\]",
                  entries["AuthHMACCacheMaxAge"][0]["Default"])
    assert m and doc_value(m.group(1), "duration") == wrapped, \
        entries["AuthHMACCacheMaxAge"][0]["Default"]
    # AuthHMACRecheck's, by source (the provider's policy_of picks one).
    said = entries["AuthHMACRecheck"][0]["Default"]
    for source, name in (("AuthHMACDBDUserPWQuery", "DEFAULT_RECHECK_SQL"),
                         ("AuthHMACProvider", "DEFAULT_RECHECK_WRAPPED")):
        m = re.search(r"`(?:AuthHMACRecheck )?(\d+[smhd]?)` with \[%s\]" % source, said)
        assert m and doc_value(m.group(1), "duration") == macro(code, name), (said, name)
        assert re.search(r"apr_time_from_sec\(%s\)" % name, code), name


def test_summary_table_matches_the_entries():
    """directives.md opens with a table of every directive, linked to its
    entry, with the entry's default and context."""
    doc = read("docs", "directives.md")
    entries = doc_entries()
    rows = re.findall(r"^\| \[`?(AuthHMAC\w+)`?\]\(#(\S+?)\) \| (.*?) \| (.*?) \| (.*?) \|$",
                      doc, re.M)
    assert [r[0] for r in rows] == list(entries), [r[0] for r in rows]
    for name, anchor, default, context, what in rows:
        assert anchor == name.lower(), (name, anchor)
        rows_ = entries[name][0]
        d = re.sub(r"^`%s " % name, "`", rows_["Default"])
        assert default == d, (name, default, d)
        assert context == rows_["Context"], (name, context)
        assert what, name


def test_every_log_tag_is_used_once_and_listed():
    used = re.findall(r"AHMAC\d{4}", read_glue(".c") + "".join(
        read(d, f) for d, _, files in sorted(os.walk(os.path.join(TOP, "src")))
        for f in sorted(files) if f.endswith(".c")))
    assert len(used) >= 17 and len(used) == len(set(used)), sorted(used)
    ops = read("docs", "operations.md")
    listed = set(re.findall(r"^\| `(AHMAC\d{4})` \|", ops, re.M))
    assert listed == set(used), set(used) ^ listed
    # Every tag the pages, the README and the shipped files name is one the
    # code logs: a tag renumbered or dropped in the code is not left behind.
    for name in DOC_FILES + [os.path.join(d, f) for d in ("conf", os.path.join("conf", "fail2ban"))
                             for f in sorted(os.listdir(os.path.join(TOP, d)))
                             if os.path.isfile(os.path.join(TOP, d, f))]:
        named = set(re.findall(r"AHMAC\d{4}", read(name)))
        assert named <= set(used), (name, named - set(used))
    # The README and operations.md give their range: its last is the last
    # one used.
    for name in ("README.md", os.path.join("docs", "operations.md")):
        m = re.search(r"`AHMAC0001`\s+to\s+`(AHMAC\d{4})`", read(name))
        assert m and m.group(1) == max(used), (name, m and m.group(1), max(used))


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


# ----------------------------------------------------------------------
# Every ```apache block of README.md and docs/*.md passes `httpd -t`.

DOC_FILES = ["README.md"] + [os.path.join("docs", f) for f in
                             sorted(os.listdir(os.path.join(TOP, "docs"))) if f.endswith(".md")]
# A block that truly cannot be checked (it needs a module this machine has
# not) says why on the line before its fence; the test reports it as a
# skip with that reason. Keep these few.
OPT_OUT = re.compile(r"^\s*<!-- not checked by test_docs: (.+?) -->\s*$")
MAX_OPT_OUTS = 2
# Modules the blocks use beyond the harness's (the migration's "before",
# the example virtual host's TLS).
DOC_MODULES = ["authn_socache", "socache_shmcb", "ssl", "dbd", "ldap", "authnz_ldap"]
# Absolute paths of the host that a block may name; each is moved under
# the test's directory and made to exist.
HOST_PATH = re.compile(r"(?<![\w.~-])/(?:etc|var|run|srv|opt|home)/[^\s\"'<>]*")


def apache_blocks():
    """(file, line of the fence, text, opt-out reason or None) of every
    ```apache block, indented ones (in list items) included."""
    blocks = []
    for name in DOC_FILES:
        lines = read(name).splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)```apache\s*$", lines[i])
            if not m:
                i += 1
                continue
            indent, start = m.group(1), i
            j = i + 1
            while not re.match(r"^%s```\s*$" % indent, lines[j]):
                j += 1
            text = "\n".join(l[len(indent):] for l in lines[i + 1:j]) + "\n"
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            opt = OPT_OUT.match(lines[k]) if k >= 0 else None
            blocks.append((name, start + 1, text, opt.group(1) if opt else None))
            i = j + 1
    # The complete virtual host that the docs point to, as a whole.
    example = os.path.join("conf", "mediawiki-vhost.conf.example")
    blocks.append((example, 1, read(example), None))
    return blocks


BLOCKS = apache_blocks()


def test_docs_have_apache_blocks_and_few_opt_outs():
    assert len(BLOCKS) >= 25, len(BLOCKS)
    out = ["%s:%d: %s" % (n, l, why) for n, l, _, why in BLOCKS if why]
    assert len(out) <= MAX_OPT_OUTS, out


def make_paths(root, text):
    """text with every host path moved under root, and what it names made:
    a pepper (or two) or Redis auth file as the module requires it (mode 0600), an
    htpasswd file by the real htpasswd, real PEM files for the Redis TLS
    directives (a CA, and a client certificate it signs with its key), a
    directory for a <Directory>, DocumentRoot or Mutex, and the parent
    directory of anything else."""
    from harness import TestCA, htpasswd
    tls = {}

    def tls_file(directive):
        if not tls:
            ca = TestCA(dir=os.path.join(root, "test-ca"))
            cert, key = ca.issue(cn="web", dns=(), ips=(), client=True)
            tls.update({"AuthHMACRedisTLSCACertificateFile": ca.cert,
                        "AuthHMACRedisTLSCertificateFile": cert,
                        "AuthHMACRedisTLSKeyFile": key})
        return tls[directive]

    def move(m):
        os.makedirs(os.path.dirname(root + m.group(0)), exist_ok=True)
        return root + m.group(0)
    text = HOST_PATH.sub(move, text)
    for line in text.splitlines():
        words = line.strip().lstrip("<").rstrip(">").replace('"', "").split()
        if len(words) < 2 or words[0].startswith("#"):
            continue
        directive, arg = words[0], words[1]
        if arg.startswith("file:"):
            arg = arg[len("file:"):]
        if not arg.startswith(root):
            continue
        if directive in ("Directory", "DocumentRoot", "Mutex"):
            os.makedirs(arg, exist_ok=True)
        elif directive == "AuthHMACPepperFile":
            # NB: and the previous pepper's, during a rotation.
            for path in [arg] + [w for w in words[2:] if w.startswith(root)]:
                with open(path, "wb") as f:
                    f.write(os.urandom(32))
                os.chmod(path, 0o600)
        elif directive in ("AuthHMACRedisAuthFile", "AuthHMACRedisSentinelAuthFile"):
            with open(arg, "w") as f:
                f.write("authn-hmac a-long-random-password\n")
            os.chmod(arg, 0o600)
        elif directive in ("AuthHMACUserFile", "AuthUserFile"):
            htpasswd(arg, "alice", "correct horse", cost=4, create=True)
        elif directive.startswith("AuthHMACRedisTLS") and directive.endswith("File"):
            shutil.copy(tls_file(directive), arg)
            os.chmod(arg, 0o600 if directive.endswith("KeyFile") else 0o644)
        elif directive in ("SSLCertificateFile", "SSLCertificateKeyFile"):
            with open(arg, "w") as f:  # httpd -t only checks that it is not empty
                f.write("not a certificate\n")
    return text


@pytest.mark.parametrize("name,line,text,why", BLOCKS,
                         ids=["%s:%d" % (b[0], b[1]) for b in BLOCKS])
def test_apache_block_passes_configtest(name, line, text, why):
    """The block, pasted into a server's configuration as it stands (server
    config), or if it is a fragment for a section (an .htaccess, lines
    for a <Location>) inside a <Directory>, passes `httpd -t` with the
    module built from this tree: what an admin pastes is accepted."""
    from harness import Httpd
    if why:
        pytest.skip("opt-out in %s:%d: %s" % (name, line, why))
    srv = Httpd(name="docs", modules=DOC_MODULES)
    try:
        srv.global_conf = 'Define APACHE_LOG_DIR "%s"' % srv.path("logs")
        block = make_paths(srv.path("host"), text)
        tried = []
        for context in ("server config", "<Directory>"):
            conf = block
            if context == "<Directory>":
                os.makedirs(srv.path("fragment"), exist_ok=True)
                conf = '<Directory "%s">\n%s</Directory>\n' % (srv.path("fragment"), block)
            with open(srv.path("block.conf"), "w") as f:
                f.write(conf)
            srv.body = 'Include "%s"\n' % srv.path("block.conf")
            srv.write_config()
            rc, out = srv.configtest()
            if rc == 0:
                # NB: nothing else: a warning (a DocumentRoot that does not
                # exist, say) means the block was not checked as written.
                assert out.strip() == "Syntax OK", (name, line, out)
                return
            tried.append("as %s: exit %d\n%s" % (context, rc, out))
        pytest.fail("%s:%d does not pass `httpd -t`:\n%s\n%s" % (name, line, text,
                                                                 "\n".join(tried)))
    finally:
        shutil.rmtree(srv.dir, ignore_errors=True)


def test_htpasswd_commands_say_their_bcrypt_cost():
    """`htpasswd -B` alone writes cost 5 ($2y$05$, ~3 ms), not the cost 12
    the docs speak of: every htpasswd command of the docs and the example
    that writes bcrypt says -C, and what the docs say -B alone writes is
    what the real htpasswd writes."""
    from harness import S
    files = DOC_FILES + [os.path.join("docs", f) for f in
                         sorted(os.listdir(os.path.join(TOP, "docs"))) if f[-2:] in (".1", ".8")]
    files += [os.path.join("conf", "mediawiki-vhost.conf.example")]
    for name in files:
        for m in re.finditer(r"`htpasswd -B`(.{0,20})", read(name), re.S):
            assert re.match(r"\s+alone writes cost", m.group(1)), (name, m.group(0))
    commands = []
    for name in files:
        # htpasswd, its options, then a file argument (not a number).
        command = r"htpasswd((?:\s+-[A-Za-z0-9]+(?:\s+\d+)?)+)\s+[A-Za-z_/.]"
        for m in re.finditer(command, read(name)):
            commands.append((name, m.group(0)))
            flags = "".join(w[1:] for w in m.group(1).split() if w.startswith("-"))
            if "B" in flags:
                assert re.search(r"-C \d+", m.group(1)), (name, m.group(0))
    assert len(commands) >= 4, commands
    claims = [(name, m.group(1), m.group(2)) for name in files for m in re.finditer(
        r"`htpasswd -B` alone writes cost (\d+),\s+`(\$2y\$\d\d\$)`", read(name))]
    assert len(claims) >= 2, claims
    out = subprocess.run([S["htpasswd"], "-nbB", "alice", "x"], capture_output=True,
                         text=True, check=True).stdout
    for name, cost, prefix in claims:
        assert out.startswith("alice:" + prefix) and prefix == "$2y$%02d$" % int(cost), \
            (name, cost, prefix, out)


def test_removal_search_is_the_packages():
    """docs/operations.md's search for sites that still use the module is
    the prerm's, which skips comments (a plain `AuthHMAC` matched `# Was:
    AuthBasicProvider hmac` lines), and covers /etc/apache2-NAME."""
    prerm = re.search(r"grep -lisE '([^']+)'",
                      read("debian", "libapache2-mod-authn-hmac.prerm")).group(1)
    docs = re.search(r"sudo grep -rliE '([^']+)' (.*)", read("docs", "operations.md"))
    assert docs and docs.group(1) == prerm, (docs and docs.group(1), prerm)
    assert "/etc/apache2*/" in docs.group(2), docs.group(2)
    assert re.search(prerm.replace("[[:space:]]", r"\s").replace("[^[:space:]]", r"\S"),
                     "    AuthBasicProvider file hmac", re.I)
    assert not re.search(prerm.replace("[[:space:]]", r"\s").replace("[^[:space:]]", r"\S"),
                         "# Was: AuthBasicProvider hmac", re.I | re.M)


def test_tls_farm_example_certificates_and_users_work():
    """docs/operations.md's TLS farm: its openssl commands, run as given
    (bash), make a CA, Redis's certificate and a client's; a redis-server
    with the example's TLS and user lines takes them, the admin user runs
    what an admin runs, and the module's user passes the docs' PING check
    with the client certificate."""
    from harness import Redis
    ops = read("docs", "operations.md")
    script = re.search(r"```sh\n(# The CA\..*?)```", ops, re.S).group(1)
    conf = re.search(r"```\nport 0\n(.*?)```", ops, re.S).group(1)
    users = [l for l in conf.splitlines() if l.startswith("user ")]
    admin = re.match(r"user admin on >(\S+) (.*)", users[1])
    module = re.match(r"user authn-hmac on >(\S+) (.*)", users[2])
    assert users[0] == "user default off" and admin and module, users
    d = tempfile.mkdtemp(prefix="authn_hmac_tlsdoc_")
    redis = None
    try:
        p = subprocess.run(["bash", "-e", "-c", script], cwd=d, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        f = {n: os.path.join(d, n) for n in ("ca.pem", "redis.pem", "redis.key",
                                               "redis-client.pem", "redis-client.key")}
        redis = Redis(password=None, acl_user=("admin", admin.group(1)),
                      acl_rules=admin.group(2), extra=[users[0], users[2]],
                      tls={"cert": f["redis.pem"], "key": f["redis.key"], "ca": f["ca.pem"],
                           "auth_clients": True,
                           "client": (f["redis-client.pem"], f["redis-client.key"])}).start()
        assert redis.cli("ACL", "WHOAMI") == "admin"
        p = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(redis.port), "--tls",
                            "--cacert", f["ca.pem"], "--cert", f["redis-client.pem"],
                            "--key", f["redis-client.key"], "--user", "authn-hmac",
                            "--pass", module.group(1), "PING"],
                           capture_output=True, text=True, timeout=10)
        assert p.stdout.strip() == "PONG", p.stdout + p.stderr
        # Without the client certificate, Redis refuses the connection.
        p = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(redis.port), "--tls",
                            "--cacert", f["ca.pem"], "--user", "authn-hmac",
                            "--pass", module.group(1), "PING"],
                           capture_output=True, text=True, timeout=10)
        assert p.stdout.strip() != "PONG", p.stdout
    finally:
        if redis:
            redis.cleanup()
        shutil.rmtree(d, ignore_errors=True)


def tls_cli(cafiles, ip, port, password, *args):
    """redis-cli over TLS, with the web servers' client certificate."""
    ca, cert, key = cafiles
    cmd = ["redis-cli", "--no-auth-warning", "--tls", "--cacert", ca, "--cert", cert,
           "--key", key, "-h", ip, "-p", str(port)]
    if password:
        cmd += ["-a", password]
    try:
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    return p.stdout.strip()


@pytest.mark.slow
def test_sentinel_over_tls_example_runs_and_fails_over():
    """docs/operations.md's Sentinel over TLS, as given: its certificates
    (after the TLS farm's CA), both Redis servers and three Sentinels with
    its lines (on 127.0.0.11 to .13 for 10.0.0.11 to .13, each connecting
    from its own address, free ports for 6379 and 26379, shorter failover
    times), and two web servers with its
    apache block: the primary is found over TLS, a login is shared, and
    after a kill -9 of the primary the replica is found and shared through."""
    import time
    from harness import Httpd, htpasswd
    from harness.env import free_port
    from harness.farm import FarmFiles
    from test_redis import note_of_last, wiki
    ops = read("docs", "operations.md")
    sec = ops.split("#### Sentinel over TLS, the whole example", 1)[1].split("\n### ", 1)[0]
    ca_script = re.search(r"```sh\n(# The CA\..*?)```", ops, re.S).group(1)
    cert_script = re.search(r"```sh\n(# One certificate per Redis machine.*?)```", sec,
                            re.S).group(1)
    redis_conf = re.search(r"```\n(bind 10\.0\.0\.11\nport 0\ntls-port 6379\n.*?)```", sec,
                           re.S).group(1)
    sentinel_conf = re.search(r"```\n(bind 10\.0\.0\.11\nport 0\ntls-port 26379\n.*?)```",
                              sec, re.S).group(1)
    apache = re.search(r"```apache\n(.*?)```", sec, re.S).group(1)
    assert "tls-replication yes" in redis_conf and "tls-auth-clients yes" in redis_conf
    assert "tls-replication yes" in sentinel_conf
    admin = re.search(r"requirepass (\S+)", redis_conf).group(1)
    sentinel_pass = re.search(r"requirepass (\S+)", sentinel_conf).group(1)
    module_pass = re.search(r"user authn-hmac on >(\S+)", redis_conf).group(1)
    rport, sport = free_port(), free_port()
    d = tempfile.mkdtemp(prefix="authn_hmac_sentls_")
    os.chmod(d, 0o755)
    procs, servers, shared = [], [], None

    def local(text, ip, mdir):
        text = text.replace("26379", str(sport)).replace("6379", str(rport))
        text = re.sub(r"10\.0\.0\.(\d+)", r"127.0.0.\1", text)
        text = re.sub(r"(?m)^bind .*$", "bind " + ip, text)
        # NB: and on one host, each "machine" connects from its own
        # address, as it would from its own host (else a Sentinel and the
        # replica announce 127.0.0.1, the source the kernel picks).
        if ip:
            text += "bind-source-addr %s\n" % ip
        return text.replace("/etc/redis/tls/", mdir + "/")

    def machine(n):
        mdir = os.path.join(d, "m%d" % n)
        os.makedirs(mdir, exist_ok=True)
        for src, dst in (("redis-127.0.0.%d.pem" % n, "redis.pem"),
                         ("redis-127.0.0.%d.key" % n, "redis.key"), ("ca.pem", "ca.pem")):
            shutil.copy(os.path.join(d, src), os.path.join(mdir, dst))
        return mdir

    def start(conf_text, mdir, name, sentinel=False):
        path = os.path.join(mdir, name + ".conf")
        with open(path, "w") as f:
            f.write(conf_text + "daemonize no\nsave \"\"\nappendonly no\ndir %s\n"
                    "logfile %s/%s.log\n" % (mdir, mdir, name))
        p = subprocess.Popen(["redis-server", path] + (["--sentinel"] if sentinel else []),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    def wait_for(cond, seconds, what):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.2)
        logs = ""
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith(".log"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        logs += "== %s\n%s" % (f, "".join(fh.readlines()[-15:]))
        raise AssertionError("%s: not within %d s\n%s" % (what, seconds, logs + "".join(
            s.error_log_tail() for s in servers)))

    try:
        # NB: the certificates for the addresses used here.
        p = subprocess.run(["bash", "-e", "-c", ca_script + re.sub(
            r"10\.0\.0\.(\d+)", r"127.0.0.\1", cert_script)], cwd=d,
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        client = (os.path.join(d, "ca.pem"), os.path.join(d, "redis-client.pem"),
                  os.path.join(d, "redis-client.key"))
        m = {n: machine(n) for n in (11, 12, 13)}
        start(local(redis_conf, "127.0.0.11", m[11]), m[11], "redis")
        # NB: the replica's one line more, as the text says.
        start(local(redis_conf, "127.0.0.12", m[12]) + "replicaof 127.0.0.11 %d\n" % rport,
              m[12], "redis")
        wait_for(lambda: "master_link_status:up" in tls_cli(
            client, "127.0.0.12", rport, admin, "INFO", "replication"), 30,
            "the replica syncs over TLS")
        fast = (sentinel_conf.replace("down-after-milliseconds authcache 5000",
                                      "down-after-milliseconds authcache 1000")
                .replace("failover-timeout authcache 60000", "failover-timeout authcache 3000"))
        for n in (11, 12, 13):
            start(local(fast, "127.0.0.%d" % n, m[n]), m[n], "sentinel", sentinel=True)
        wait_for(lambda: all(
            tls_cli(client, "127.0.0.%d" % n, sport, sentinel_pass, "SENTINEL", "sentinels",
                    "authcache").splitlines().count("name") >= 2 and
            tls_cli(client, "127.0.0.%d" % n, sport, sentinel_pass, "SENTINEL", "replicas",
                    "authcache").splitlines().count("name") >= 1 for n in (11, 12, 13)),
            40, "the Sentinels know each other and the replica, over TLS")

        shared = FarmFiles(prefix="authn_hmac_sentls_farm_")
        files = {"/etc/apache2/authn_hmac.pepper": shared.pepper,
                 "/etc/apache2/redis-ca.pem": client[0],
                 "/etc/apache2/redis-client.pem": client[1],
                 "/etc/apache2/redis-client.key": client[2]}
        for path, text in (("/etc/apache2/authn_hmac.sentinel-auth", sentinel_pass + "\n"),
                           ("/etc/apache2/authn_hmac.redis-auth",
                            "authn-hmac %s\n" % module_pass)):
            files[path] = os.path.join(d, os.path.basename(path))
            with open(files[path], "w") as f:
                f.write(text)
            os.chmod(files[path], 0o600)
        os.chmod(client[2], 0o600)
        conf = local(apache, "", "")
        for path, real in files.items():
            conf = conf.replace(path, real)
        # NB: the example's 50 ms is a LAN's; this machine runs the suite.
        conf = re.sub(r"AuthHMACRedisTimeout +50", "AuthHMACRedisTimeout 2000", conf)
        for name in ("sentlsA", "sentlsB"):
            srv = Httpd(mpm="event", name=name)
            srv.global_conf = conf
            srv.body = wiki(srv, shared.users)
            srv.write_config()
            with open(srv.path("htdocs", "index.html"), "w") as f:
                f.write("wiki page\n")
            servers.append(srv)
            srv.start()
        a, b = servers
        wait_for(lambda: all(re.search(r"AHMAC0024: the primary of 'authcache' is "
                                       r"127\.0\.0\.11:%d" % rport, s.error_log())
                             for s in servers), 30, "the primary is found over TLS")
        assert a.status_code("/w/", "alice", "alice farm pass") == 200
        assert b.status_code("/w/", "alice", "alice farm pass") == 200
        assert note_of_last(b, "alice") == "redis-hit"
        # kill -9 of the primary: the Sentinels promote the replica, over
        # TLS, and the servers follow it.
        procs[0].kill()
        procs[0].wait()
        wait_for(lambda: all(re.search(r"AHMAC0024: the primary of 'authcache' is now "
                                       r"127\.0\.0\.12:%d" % rport, s.error_log())
                             for s in servers), 40, "the replica is found over TLS")
        htpasswd(shared.users, "bob", "bob farm pass", cost=4)
        for _ in range(50):
            assert a.status_code("/w/", "bob", "bob farm pass") == 200
            if b.status_code("/w/", "bob", "bob farm pass") == 200 and \
                    note_of_last(b, "bob") == "redis-hit":
                break
            time.sleep(0.2)
        assert note_of_last(b, "bob") == "redis-hit", b.error_log_tail()
    finally:
        for s in servers:
            s.stop()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if shared:
            shared.cleanup()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(not shutil.which("fail2ban-client") or
                    not os.path.isdir("/etc/fail2ban/filter.d"),
                    reason="fail2ban is not installed")
def test_the_fail2ban_jails_as_documented_load():
    """The jail.d file in docs/operations.md, over Debian's own fail2ban
    configuration with the module's filter installed: both jails come on,
    each with the addresses never to ban, and the module's filter's
    failregex."""
    block = re.search(r"```ini\n(# /etc/fail2ban/jail.d/authn-hmac.local\n.*?)```",
                      read("docs", "operations.md"), re.S).group(1)
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "fail2ban")
        shutil.copytree("/etc/fail2ban", conf)
        shutil.copy(os.path.join(TOP, "conf", "fail2ban", "authn-hmac.conf"),
                    os.path.join(conf, "filter.d"))
        with open(os.path.join(conf, "jail.d", "authn-hmac.local"), "w") as f:
            f.write(block)
        p = subprocess.run(["fail2ban-client", "-c", conf, "-d"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        for jail in ("apache-auth", "authn-hmac"):
            assert "['add', '%s', " % jail in p.stdout, p.stdout
            assert "['set', '%s', 'addignoreip', '127.0.0.1/8', '::1', '192.0.2.0/24']" \
                % jail in p.stdout, p.stdout
        assert re.search(r"\['set', 'authn-hmac', 'addfailregex', '.*AHMAC0029", p.stdout), \
            p.stdout


# ----------------------------------------------------------------------
# Links between the pages, and the directive entries' length.

def anchors(text):
    """The anchors GitHub makes for a page's headings (outside code)."""
    out, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for h in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def test_links_between_pages_reach_their_anchors():
    """Every relative link of README.md and docs/*.md names a file that
    exists and, with #anchor, a heading of it: moving a section between
    pages leaves no link behind."""
    checked = 0
    for name in DOC_FILES:
        text = re.sub(r"^```.*?^```", "", read(name), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(name), path)) if path else name
            assert os.path.exists(os.path.join(TOP, dest)), (name, target)
            if anchor and dest.endswith(".md"):
                assert anchor in anchors(read(dest)), (name, target)
                checked += 1
    assert checked >= 50, checked


def test_directive_entries_stay_short():
    """An entry is its table and what an admin needs to choose a value: at
    most 25 lines of text below the table (examples aside); the mechanism
    belongs in how-it-works.md, security.md or operations.md."""
    for name, (_, body) in doc_entries().items():
        below = body.split("| Module | mod_authn_hmac |", 1)[1]
        below = re.sub(r"^```.*?^```", "", below, flags=re.M | re.S)
        lines = [line for line in below.splitlines() if line.strip() and line.strip() != "---"]
        assert len(lines) <= 25, (name, len(lines))

"""A private httpd with the module built from this tree, on its own
loopback port; htpasswd; the hmac auth block."""
import base64
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from . import proc
from .proc import children as proc_children, wait_exited
from .client import ab
from .env import COST, IS_ROOT, S, VALGRIND, free_port, run_user

MPM_CONF = {
    "prefork": """StartServers 8
MinSpareServers 8
MaxSpareServers 16
ServerLimit 16
MaxRequestWorkers 16""",
    "worker": """StartServers 2
ServerLimit 4
ThreadsPerChild 16
MinSpareThreads 16
MaxSpareThreads 64
MaxRequestWorkers 64""",
    "event": """StartServers 2
ServerLimit 4
ThreadsPerChild 16
MinSpareThreads 16
MaxSpareThreads 64
MaxRequestWorkers 64""",
}

# Lines httpd or mod_auth_basic write on their own for what the tests do.
EXPECTED_LOG = [
    r"\[auth_basic:error\].*AH01617: user .*: authentication failure",
    r"\[auth_basic:error\].*AH01618: user .* not found",
    r"\[auth_basic:error\].*AH01614: client used wrong authentication scheme",
    r"\[mpm_\w+:notice\]",
    r"\[core:notice\].*AH00094",  # Command line: ...
    r"\[core:notice\].*AH00060",  # SIGHUP received
    r"\[core:notice\].*AH00171",  # Graceful restart requested
    r"\[core:notice\].*AH00169",  # caught SIGTERM
    r"\[core:notice\].*AH00163",  # resuming normal operations (older)
    r"\[authn_hmac:notice\].*AHMAC0014: .*random pepper",
]


def htpasswd(path, user, password, cost=None, create=False, delete=False):
    """Runs the real htpasswd, as an admin would."""
    args = [S["htpasswd"]]
    if delete:
        args += ["-D", path, user]
    else:
        args += (["-c"] if create else []) + ["-B", "-C", str(cost or COST), "-b", path, user,
                                              password]
    subprocess.run(args, check=True, capture_output=True)
    os.chmod(path, 0o644)


def htpasswd_line(user, password, cost=None):
    """user's line as `htpasswd -nbB` makes it, without a file: for large
    files made fast (one real hash repeated, or a few placed among them)."""
    p = subprocess.run([S["htpasswd"], "-n", "-b", "-B", "-C", str(cost or COST), user,
                        password], capture_output=True, text=True, check=True)
    line = p.stdout.strip()
    if not line.startswith(user + ":$2y$"):
        raise RuntimeError("unexpected htpasswd -n output: %r" % line)
    return line


def hmac_auth(userfile, realm, *extra, provider="hmac", require="valid-user"):
    """Basic auth through provider (hmac: AuthHMACUserFile; a provider list
    with file: AuthUserFile; else no user file when userfile is None), with
    the extra directives (empty ones skipped), one per line: the inside of
    an auth section, or an .htaccess file."""
    lines = ["AuthType Basic", 'AuthName "%s"' % realm, "AuthBasicProvider " + provider]
    if userfile is not None:
        directive = "AuthHMACUserFile" if provider == "hmac" else "AuthUserFile"
        lines.append('%s "%s"' % (directive, userfile))
    lines += [e for e in extra if e]
    lines.append("Require " + require)
    return "\n".join(lines) + "\n"


def hmac_location(path, userfile, realm, *extra, provider="hmac", require="valid-user",
                  section="Location"):
    """A <Location path> (or another section) that requires Basic auth
    through the hmac provider with userfile; see hmac_auth()."""
    inside = hmac_auth(userfile, realm, *extra, provider=provider, require=require)
    return "<%s %s>\n%s</%s>\n" % (section, path, "".join(
        "    " + line + "\n" for line in inside.splitlines()), section)


def changed_default(why, **directives):
    """Config lines that change the module's shipped defaults
    (AuthHMACMaxFailures=0, ...), after a comment with why: the one-line
    reason a test (or tool) does not run what users run. The harness
    itself changes none."""
    if not why.strip() or "\n" in why or not directives:
        raise ValueError("changed_default(): one line of why, and the directives")
    return "# Changed from the shipped default: %s\n%s" % (why.strip(), "".join(
        "%s %s\n" % kv for kv in directives.items()))


def read_pid(path):
    """The number in a pid file, or None (not written yet, or gone)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def read_log(path):
    """A log file's text, or "" if there is none (yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def check_log(*servers):
    """Each server's error log: no line at warn or worse that its test did
    not expect, and no secret (the list of them is the message)."""
    for srv in servers:
        problems = srv.log_problems()
        assert not problems, problems


def finish(srv, *expected):
    """A test's server at its end: stopped (memcheck's report is complete
    once httpd is done), the lines expected (regexes) allowed, and no other
    line at warn or worse (the lines, one a line, are the message)."""
    srv.stop()
    for e in expected:
        srv.expect_log(e)
    problems = srv.log_problems()
    assert not problems, "\n".join(problems)


def last_note(srv, user):
    """The authn-hmac note of user's last request to srv, or None."""
    notes = srv.notes(user)
    return notes[-1] if notes else None


def cleanup(*things):
    """Each thing's cleanup(), in order: servers, Redis, a farm's files."""
    for thing in things:
        thing.cleanup()


def threads_of(pid):
    """Each thread of pid: its name, state, kernel wait channel and
    syscall (from /proc), as one line."""
    out = []
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return "gone"
    for tid in tids:
        def read(name, tid=tid):
            try:
                with open("/proc/%d/task/%s/%s" % (pid, tid, name)) as f:
                    return f.read().strip()
            except OSError:
                return "?"
        stat = read("stat")
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        out.append("%s %s %s wchan=%s syscall=%s" % (
            tid, read("comm"), state, read("wchan"), read("syscall").split(" ")[0]))
    return "; ".join(out)


ACCEPT_SYSCALLS = ("43", "288")  # accept, accept4 on x86-64


def syscall_of(pid):
    """The system call pid's main thread is in, as /proc gives its number."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return f.read().split(" ")[0]
    except OSError:
        return None


def client_stacks(pid):
    """Under valgrind: each client thread's state and stack, from its
    gdbserver (vgdb), or why not."""
    try:
        return subprocess.run(["vgdb", "--pid=%d" % pid, "v.info", "scheduler"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return "vgdb: %s" % e


class Httpd:
    """One httpd instance in its own directory, on its own loopback port.
    modules: more modules to load (names as in mod_<name>.so); mpm_conf:
    the MPM's directives instead of MPM_CONF's; log_level; log_requests:
    False for no access log (tools/bench)."""

    def __init__(self, mpm=None, as_user=None, global_conf="", body="", name="httpd",
                 port=None, directory=None, modules=(), mpm_conf=None,
                 log_level="warn authn_hmac:debug", log_requests=True):
        self.name = name
        self.mpm = mpm or ("prefork" if VALGRIND else "event")
        self.modules = list(modules)
        self.mpm_conf = mpm_conf or MPM_CONF[self.mpm]
        self.log_level = log_level
        self.log_requests = log_requests
        self.as_user = as_user  # run the whole server as this account
        self.dir = directory or tempfile.mkdtemp(prefix="authn_hmac_%s_" % name)
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.port = port or free_port()
        # NB: the module's shipped defaults, the throttle on guessing too:
        # the tests run what users run. A test that changes a default says
        # which and why (changed_default()); clients that send many wrong
        # passwords on purpose come from addresses of their own
        # (client_address()), as a real site's clients do.
        self.global_conf = global_conf
        self.body = body
        self.expected_log = list(EXPECTED_LOG)
        self.secrets = set()  # strings that must never reach a log
        self.sent = {}  # user -> requests sent with that user's credentials
        # The loopback address status_code() sends from unless told: a
        # test's own client (client_address()), None for 127.0.0.1.
        self.source = None
        for d in ("logs", "run", "htdocs"):
            os.makedirs(self.path(d), exist_ok=True)
        self.conf = self.path("httpd.conf")
        self.write_config()

    def path(self, *p):
        return os.path.join(self.dir, *p)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def config_text(self):
        mods = ["mpm_" + self.mpm, "authn_core", "authz_core", "authz_user", "authz_host",
                "auth_basic", "mime", "alias", "authn_file", "dir"] + self.modules
        lines = ["LoadModule %s_module %s/mod_%s.so" % (m, S["moddir"], m) for m in mods]
        module = S["module"]
        if self.as_user:
            # NB: the build tree may sit where that account cannot look.
            module = self.path("mod_authn_hmac.so")
            shutil.copy(S["module"], module)
        lines.append("LoadModule authn_hmac_module %s" % module)
        user_lines = ""
        if IS_ROOT and not self.as_user:
            u, g = run_user()
            user_lines = "User %s\nGroup %s" % (u, g)
        # NB: and when each request began (µs): a worker may write its line
        # after a later request's (it logs once the response is sent, and
        # a loaded machine may not run it at once): notes() orders by it.
        access_log = ('LogFormat "%u %>s %{authn-hmac}n %U %{usec}t" hmac\n'
                      'CustomLog "' + self.path("logs", "access_log") + '" hmac'
                      if self.log_requests else "")
        return "\n".join(lines) + """
ServerRoot "{d}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile "{d}/run/httpd.pid"
DefaultRuntimeDir "{d}/run"
Mutex default:{d}/run
ErrorLog "{d}/logs/error_log"
LogLevel {log_level}
{access_log}
DocumentRoot "{d}/htdocs"
DirectoryIndex index.html
TypesConfig /dev/null
KeepAlive On
MaxKeepAliveRequests 0
Timeout 30
{user_lines}
{mpm}
{global_conf}
<Directory />
    Require all granted
</Directory>
{body}
<Location /authn-hmac-status>
    SetHandler authn-hmac-status
    Require local
</Location>
""".format(d=self.dir, port=self.port, user_lines=user_lines, mpm=self.mpm_conf,
           log_level=self.log_level, access_log=access_log,
           global_conf=self.global_conf, body=self.body)

    def write_config(self):
        with open(self.conf, "w") as f:
            f.write(self.config_text())
        if self.as_user:
            pw = pwd.getpwnam(self.as_user)
            for root, dirs, files in os.walk(self.dir):
                for n in dirs + files + [""]:
                    os.chown(os.path.join(root, n), pw.pw_uid, pw.pw_gid)

    def _cmd(self, *args):
        cmd = [S["httpd"], "-d", self.dir, "-f", self.conf] + list(args)
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--"] + cmd
        return cmd

    def _env(self):
        """httpd's environment: with a sanitizer build, its runtime is
        preloaded (httpd itself is not instrumented) and reports go to
        logs/san.<pid>, which log_problems() turns into failures."""
        env = dict(os.environ)
        if S.get("preload"):
            out = self.path("logs", "san")
            env["LD_PRELOAD"] = S["preload"]
            # NB: httpd keeps pools until exit by design; leaks are checked
            # by the unit tests and the fuzzers instead.
            env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:log_path=" + out
            env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:log_path=" + out
        return env

    def _run(self, *args, check=False):
        return subprocess.run(self._cmd(*args), capture_output=True, text=True,
                              env=self._env(), check=check)

    def configtest(self):
        """(exit code, output) of `httpd -t` on the current config."""
        p = self._run("-t")
        return p.returncode, p.stdout + p.stderr

    def pid(self):
        return read_pid(self.path("run", "httpd.pid"))

    def _answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def start(self):
        if VALGRIND:
            return self._start_valgrind()
        p = self._run("-k", "start")
        if p.returncode != 0:
            raise RuntimeError("httpd did not start: %s%s" % (p.stdout, p.stderr))
        for _ in range(200):
            if self._answers() and self.pid():
                return self
            time.sleep(0.05)
        raise RuntimeError("httpd did not come up:\n" + self.error_log())

    def _serves(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as c:
                # NB: any answer (a 404 where no status handler is
                # configured) was served by a worker: startup is over.
                c.sendall(b"GET /authn-hmac-status HTTP/1.0\r\n\r\n")
                return c.recv(64).startswith(b"HTTP/1.1 ")
        except OSError:
            return False

    def _start_valgrind(self):
        """httpd -X (one process, in the foreground) under memcheck."""
        cmd = ["valgrind", "--tool=memcheck", "--trace-children=no", "--num-callers=30",
               "--leak-check=full", "--show-leak-kinds=definite",
               "--errors-for-leak-kinds=definite", "--suppressions=" + VALGRIND,
               "--log-file=" + self.path("logs", "valgrind.%p")]
        self.proc = subprocess.Popen(cmd + self._cmd("-X"), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=self._env())
        for _ in range(1200):
            # NB: the port answers before startup is over; a served request
            # marks its end.
            if self._answers() and self._serves():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("httpd -X under valgrind did not come up:\n" + self.error_log())

    def children(self):
        """PIDs of the parent's children."""
        return proc.children(self.pid())

    def pids(self):
        """The parent and its children (the MPM's processes), sorted."""
        parent = self.pid()
        return sorted([parent] + self.children()) if parent else []

    def restart(self, graceful=True):
        """Graceful or full restart; waits until the new generation serves
        and every child of the old one is gone (an old child may otherwise
        take one more connection, with the old cache)."""
        gen, old = self.generation(), set(self.children())
        self._run("-k", "graceful" if graceful else "restart", check=True)
        for _ in range(400):
            if self.generation() > gen and self._answers() and not old & set(self.children()):
                return
            time.sleep(0.05)
        raise RuntimeError("httpd did not restart:\n" + self.error_log())

    def generation(self):
        return self.error_log().count("resuming normal operations")

    def _wait_exit(self, proc, timeout):
        """Waits for httpd -X to end after SIGTERM. Its one process (prefork's
        child_main) looks at the flag SIGTERM sets, then calls accept(): a
        SIGTERM handled between the two leaves it in accept() until a
        connection comes. That is httpd's race (shown with gdb: SIGTERM
        given at the ap_update_child_status() before accept()), which
        valgrind widens: about 1 stop in 500 beside busy loops, and the
        120 s hang of two loaded CI runs. A connection then ends it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                proc.wait(timeout=2)
                return True
            except subprocess.TimeoutExpired:
                pass
            # NB: under as_user, httpd is runuser's child.
            if any(syscall_of(p) in ACCEPT_SYSCALLS
                   for p in [proc.pid] + proc_children(proc.pid)):
                with open(self.path("logs", "error_log"), "a") as f:
                    f.write("[harness] httpd -X was in accept() after SIGTERM: "
                            "a connection ends it\n")
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                except OSError:
                    pass
        return proc.poll() is not None

    def stop(self):
        proc = getattr(self, "proc", None)
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                if not self._wait_exit(proc, 120):
                    # NB: anything else that holds httpd -X at its exit:
                    # where each thread waits goes to the error log.
                    self.stuck = threads_of(proc.pid) + "\n" + client_stacks(proc.pid)
                    with open(self.path("logs", "error_log"), "a") as f:
                        f.write("[harness] httpd -X did not exit within 120 s of "
                                "SIGTERM; its threads: %s\n" % self.stuck)
                    proc.kill()
                    proc.wait()
            self.proc = None
            return
        pid = self.pid()
        self._run("-k", "stop")
        if wait_exited(pid):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended between the last look and now

    def error_log(self):
        return read_log(self.path("logs", "error_log"))

    def error_log_tail(self, n=20):
        return "".join(self.error_log().splitlines(True)[-n:])

    def access_log(self):
        try:
            with open(self.path("logs", "access_log"), errors="replace") as f:
                return f.read().splitlines()
        except OSError:
            return []

    def notes(self, user):
        """The authn-hmac notes of user's requests, in order. Waits for the
        access log to catch up: it is written after the response."""
        want = self.sent.get(user, 0)
        for _ in range(100):
            lines = [l.split() for l in self.access_log() if l.startswith(user + " ")]
            got = [l[2] for l in sorted(lines, key=lambda l: int(l[-1]))]
            if len(got) >= want:
                return got
            time.sleep(0.02)
        return got

    def expect_log(self, regex):
        self.expected_log.append(regex)

    def log_problems(self):
        """Lines at warn or worse that no test expected, and any secret seen."""
        bad = []
        text = self.error_log()
        for line in text.splitlines():
            if not re.search(r"\[\w+:(warn|error|crit|alert|emerg)\]", line):
                continue
            if not any(re.search(e, line) for e in self.expected_log):
                bad.append(line)
        for s in self.secrets:
            if s and s in text:
                bad.append("a secret reached the error log: %r" % s)
        if getattr(self, "stuck", None):
            bad.append("httpd -X did not exit within 120 s of SIGTERM; its "
                       "threads: %s" % self.stuck)
        logs = self.path("logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if name.startswith("valgrind."):
                with open(os.path.join(logs, name), errors="replace") as f:
                    text = f.read()
                m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
                # NB: as_user runs runuser under memcheck, and httpd (its
                # child, not traced) natively: that log is runuser's, and
                # ends unfinished when runuser dies of the SIGTERM it passes on.
                if re.search(r"== Command: runuser ", text):
                    continue
                if not m or int(m.group(1)):
                    bad.append("memcheck %s:\n%s" % (name, text[-6000:]))
            if name.startswith("san."):
                with open(os.path.join(logs, name), errors="replace") as f:
                    bad.append("sanitizer report %s:\n%s" % (name, f.read()[:4000]))
        return bad

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ requests

    def status_code(self, path, user=None, password=None, auth_header=None, source=None):
        """HTTP status of a GET, with Basic credentials if given, from the
        loopback address source (a client of its own: client_address())
        or self.source (127.0.0.1 if None)."""
        cmd = [S["curl"], "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30"]
        source = source or self.source
        if source is not None:
            cmd += ["--interface", source]
        if user is not None:
            raw = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
            cmd += ["-H", "Authorization: Basic " + raw]
            self.secrets.add(password)
            self.sent[user] = self.sent.get(user, 0) + 1
        if auth_header is not None:
            cmd += ["-H", "Authorization: " + auth_header]
        p = subprocess.run(cmd + [self.url + path], capture_output=True, text=True)
        return int(p.stdout or 0)

    def status(self):
        out = subprocess.run([S["curl"], "-s", "--max-time", "10",
                              self.url + "/authn-hmac-status?json"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def ab(self, path, user, password, n=2000, c=8, keepalive=True, seconds=None):
        """Runs ab; returns (complete, failed, non2xx, output)."""
        self.secrets.add(password)
        r = ab(self.url + path, "%s:%s" % (user, password), n=n, c=c, keepalive=keepalive,
               seconds=seconds)
        self.sent[user] = self.sent.get(user, 0) + r["complete"]
        return r["complete"], r["failed"], r["non2xx"], r["out"]

"""A private PostgreSQL cluster (Debian's), made with initdb in a temporary
directory and run with pg_ctl on 127.0.0.1 and a free port, its unix
socket in that directory: a role and a database of its own (trust, on
loopback only) with a table users(name, hash). initdb and postgres refuse
to run as root: as root, they run as the postgres account."""
import glob
import os
import pwd
import shutil
import subprocess
import tempfile

from .env import IS_ROOT, free_port

ROLE = "authn_hmac"
DATABASE = "authn_hmac"
DRIVER = "/usr/lib/x86_64-linux-gnu/apr-util-1/apr_dbd_pgsql*.so"


def _bindir():
    """Debian's newest server binaries, else those on PATH."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    found = shutil.which("initdb")
    return os.path.dirname(found) if found else None


BINDIR = _bindir()


def _tool(name):
    return os.path.join(BINDIR, name) if BINDIR else name


def _account():
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def available():
    """The server's binaries, psql, apr-util's pgsql driver (for mod_dbd)
    and, as root, the postgres account."""
    return (BINDIR is not None
            and all(os.path.exists(_tool(t)) for t in ("initdb", "pg_ctl", "postgres"))
            and bool(shutil.which("psql") or os.path.exists(_tool("psql")))
            and bool(glob.glob(DRIVER))
            and (not IS_ROOT or _account() is not None))


class Postgres:
    def __init__(self, log_statements=False):
        """log_statements: every statement in the server log (log_statement
        = all), for queries()."""
        self.dir = tempfile.mkdtemp(prefix="authn_hmac_pg_")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "postgres.log")
        self.port = free_port()
        self.running = False
        self.as_postgres = []
        if IS_ROOT:
            pw = _account()
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        os.chmod(self.dir, 0o700)
        self._server("initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                     "-E", "UTF8", "--locale=C", "--no-sync")
        conf = ("listen_addresses = '127.0.0.1'\nport = %d\n"
                "unix_socket_directories = '%s'\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\n"
                "log_min_messages = warning\n" % (self.port, self.dir))
        if log_statements:
            conf += "log_statement = 'all'\n"
        self._server("sh", "-c", 'cat >> "$1"', "sh",
                     os.path.join(self.data, "postgresql.conf"), input=conf)
        # Loopback only, trust: no password to keep out of the logs.
        self._server("sh", "-c", 'cat > "$1"', "sh", os.path.join(self.data, "pg_hba.conf"),
                     input="local all all trust\nhost all all 127.0.0.1/32 trust\n")

    @property
    def params(self):
        """mod_dbd's DBDParams for the test role's database."""
        return "host=127.0.0.1 port=%d dbname=%s user=%s" % (self.port, DATABASE, ROLE)

    def _server(self, *args, input=None):
        p = subprocess.run(self.as_postgres + list(args), input=input, text=True,
                           capture_output=True, cwd="/")
        if p.returncode != 0:
            raise RuntimeError("%s failed (%d):\n%s%s\n%s" % (
                " ".join(args), p.returncode, p.stdout, p.stderr, self.log_text()[-4000:]))
        return p.stdout

    def start(self):
        """Starts the cluster (again); the first time, makes the role, the
        database and its table users(name, hash)."""
        first = not os.path.exists(os.path.join(self.data, "postmaster.opts"))
        self._server(_tool("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60",
                     "start")
        self.running = True
        if first:
            self.psql("CREATE ROLE %s LOGIN" % ROLE, user="postgres", database="postgres")
            self.psql("CREATE DATABASE %s OWNER %s" % (DATABASE, ROLE), user="postgres",
                      database="postgres")
            self.psql("CREATE TABLE users (name text PRIMARY KEY, hash text NOT NULL)")
        return self

    def psql(self, script, user=ROLE, database=DATABASE, variables=()):
        """Runs script with psql over TCP, stopping at the first error;
        returns what it printed (unaligned, tuples only)."""
        psql = shutil.which("psql") or _tool("psql")
        args = [psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", user, "-d", database]
        for i, v in enumerate(variables):
            args += ["-v", "p%d=%s" % (i, v)]
        p = subprocess.run(args, input=script + "\n", text=True, capture_output=True)
        if p.returncode != 0:
            raise RuntimeError("psql failed (%d): %s\n%s" % (p.returncode, script, p.stderr))
        return p.stdout

    def sql(self, statement, *args):
        """One statement, its %s placeholders bound to args (as psql
        variables, quoted by psql: no quoting here)."""
        parts = statement.split("%s")
        if len(parts) != len(args) + 1:
            raise ValueError("%d placeholders, %d arguments" % (len(parts) - 1, len(args)))
        text = parts[0] + "".join(":'p%d'%s" % (i, rest) for i, rest in enumerate(parts[1:]))
        return self.psql(text + ";", variables=args)

    def add_user(self, name, hash_):
        self.sql("INSERT INTO users (name, hash) VALUES (%s, %s)", name, hash_)

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def queries(self, value):
        """How many statements the server ran with a parameter value (as
        log_statement = all writes a prepared statement's: "DETAIL:
        parameters: $1 = 'value'")."""
        return self.log_text().count("parameters: $1 = '%s'" % value)

    def stop(self):
        """A fast shutdown: open sessions (mod_dbd's) are ended."""
        if self.running:
            self._server(_tool("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "-t", "60",
                         "stop")
            self.running = False

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

"""A private OpenLDAP slapd (Debian's 2.5), on a loopback port, with a
temporary slapd.conf and an mdb database: users under ou=people and
groups under ou=groups of dc=example,dc=com, added with ldapadd. Its stats
log (-d 256) counts the binds each DN made. With ppolicy, the password
policy overlay (OpenLDAP 2.5's, its schema built in) under a default
policy: lock() locks an account (pwdAccountLockedTime), and a bind to it
fails as a wrong password's does."""
import os
import re
import shutil
import subprocess
import tempfile
import time

from .env import free_port

SUFFIX = "dc=example,dc=com"
ADMIN = "cn=admin," + SUFFIX
ADMIN_PW = "slapd admin secret"
POLICY = "cn=default,ou=policies," + SUFFIX
SLAPD = shutil.which("slapd") or "/usr/sbin/slapd"


def available():
    return os.path.exists(SLAPD) and bool(shutil.which("ldapadd"))


def user_dn(user):
    return "uid=%s,ou=people,%s" % (user, SUFFIX)


class Slapd:
    def __init__(self, ppolicy=False):
        self.ppolicy = ppolicy
        self.dir = tempfile.mkdtemp(prefix="authn_hmac_slapd_")
        self.port = free_port()
        self.url = "ldap://127.0.0.1:%d" % self.port
        self.log = os.path.join(self.dir, "slapd.log")
        self.proc = None
        os.makedirs(os.path.join(self.dir, "data"))
        with open(os.path.join(self.dir, "slapd.conf"), "w") as f:
            f.write("".join("include /etc/ldap/schema/%s.schema\n" % s
                            for s in ("core", "cosine", "inetorgperson", "nis")))
            f.write("modulepath /usr/lib/ldap\nmoduleload back_mdb\n"
                    "pidfile %s/slapd.pid\n"
                    "database mdb\nmaxsize 10485760\nsuffix \"%s\"\n"
                    "rootdn \"%s\"\nrootpw \"%s\"\ndirectory %s/data\n"
                    "access to attrs=userPassword by self write by anonymous auth "
                    "by * none\naccess to * by * read\n"
                    % (self.dir, SUFFIX, ADMIN, ADMIN_PW, self.dir))
            if ppolicy:
                f.write("moduleload ppolicy\noverlay ppolicy\n"
                        "ppolicy_default \"%s\"\n" % POLICY)

    def start(self):
        self.logf = open(self.log, "a")
        self.proc = subprocess.Popen([SLAPD, "-f", os.path.join(self.dir, "slapd.conf"),
                                      "-h", self.url + "/", "-d", "256"],
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        for _ in range(200):
            if subprocess.run(["ldapsearch", "-x", "-H", self.url, "-b", "", "-s", "base"],
                              capture_output=True).returncode == 0:
                break
            if self.proc.poll() is not None:
                raise RuntimeError("slapd did not start:\n" + open(self.log).read())
            time.sleep(0.05)
        # NB: a restart (after stop()) keeps the database.
        if getattr(self, "seeded", False):
            return self
        self.seeded = True
        self.ldapadd("dn: %s\nobjectClass: dcObject\nobjectClass: organization\n"
                     "dc: example\no: example\n\n"
                     "dn: ou=people,%s\nobjectClass: organizationalUnit\nou: people\n\n"
                     "dn: ou=groups,%s\nobjectClass: organizationalUnit\nou: groups\n"
                     % (SUFFIX, SUFFIX, SUFFIX))
        if self.ppolicy:
            self.ldapadd("dn: ou=policies,%s\nobjectClass: organizationalUnit\nou: policies\n\n"
                         "dn: %s\nobjectClass: device\nobjectClass: pwdPolicy\ncn: default\n"
                         "pwdAttribute: userPassword\npwdLockout: TRUE\n" % (SUFFIX, POLICY))
        return self

    def ldapadd(self, ldif):
        subprocess.run(["ldapadd", "-x", "-H", self.url, "-D", ADMIN, "-w", ADMIN_PW],
                       input=ldif, text=True, check=True, capture_output=True)

    def add_user(self, user, password):
        self.ldapadd("dn: %s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\n"
                     "userPassword: %s\n" % (user_dn(user), user, user, user, password))

    def add_group(self, name, *users):
        self.ldapadd("dn: cn=%s,ou=groups,%s\nobjectClass: groupOfNames\ncn: %s\n%s"
                     % (name, SUFFIX, name,
                        "".join("member: %s\n" % user_dn(u) for u in users)))

    def passwd(self, user, new):
        """ldappasswd, as the admin."""
        subprocess.run(["ldappasswd", "-x", "-H", self.url, "-D", ADMIN, "-w", ADMIN_PW,
                        "-s", new, user_dn(user)], check=True, capture_output=True)

    def ldapmodify(self, ldif):
        subprocess.run(["ldapmodify", "-x", "-H", self.url, "-D", ADMIN, "-w", ADMIN_PW],
                       input=ldif, text=True, check=True, capture_output=True)

    def lock(self, user):
        """Locks user's account for good (ppolicy: pwdAccountLockedTime)."""
        self.ldapmodify("dn: %s\nchangetype: modify\nreplace: pwdAccountLockedTime\n"
                        "pwdAccountLockedTime: 000001010000Z\n" % user_dn(user))

    def delete(self, user):
        subprocess.run(["ldapdelete", "-x", "-H", self.url, "-D", ADMIN, "-w", ADMIN_PW,
                        user_dn(user)], check=True, capture_output=True)

    def binds(self, user):
        """How many binds as user's DN slapd has seen."""
        self.logf.flush()
        with open(self.log) as f:
            text = f.read()
        return len(re.findall(r'BIND dn="%s" method=128' % re.escape(user_dn(user)), text))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

"""Test certificates, made with the openssl command line in a temp dir: a
CA, and server and client certificates it signs (or that another CA
signs), with the names, addresses and dates a test asks for."""
import os
import shutil
import subprocess
import tempfile


def _openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError("openssl %s failed:\n%s" % (" ".join(args), p.stderr))


class TestCA:
    """A CA of its own (P-256 keys: quick to make). Files are PEM, keys
    mode 0600; cleanup() removes them all."""

    __test__ = False  # not a pytest class

    def __init__(self, name="authn-hmac test CA", dir=None):
        self.dir = dir or tempfile.mkdtemp(prefix="authn_hmac_tls_")
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.name = name
        tag = name.replace(" ", "_")
        self.key = os.path.join(self.dir, tag + ".key")
        self.cert = os.path.join(self.dir, tag + ".pem")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self.key, "-out", self.cert, "-subj", "/CN=" + name,
                 "-days", "30", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)
        os.chmod(self.key, 0o600)
        self.n = 0

    def issue(self, cn="localhost", dns=("localhost",), ips=("127.0.0.1",), days=30,
              client=False):
        """A certificate and its key, signed by this CA: (cert, key). days
        -1 makes one that has already expired."""
        self.n += 1
        base = os.path.join(self.dir, "%s%d" % ("client" if client else "server", self.n))
        key, csr, cert, ext = base + ".key", base + ".csr", base + ".pem", base + ".ext"
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + cn, cwd=self.dir)
        sans = ["DNS:" + d for d in dns] + ["IP:" + i for i in ips]
        with open(ext, "w") as f:
            if sans:
                f.write("subjectAltName=%s\n" % ",".join(sans))
            f.write("extendedKeyUsage=%s\n" % ("clientAuth" if client else "serverAuth"))
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                 "-CAcreateserial", "-days", str(days), "-extfile", ext, "-out", cert,
                 cwd=self.dir)
        os.chmod(key, 0o600)
        os.chmod(cert, 0o644)
        return cert, key

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)

"""What the servers of a farm share: a pepper and an htpasswd file with
alice in it, in a directory of their own."""
import os
import shutil
import tempfile

from .httpd import htpasswd


class FarmFiles:
    def __init__(self, prefix="authn_hmac_farm_", password="alice farm pass", cost=None):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        self.pepper = os.path.join(self.dir, "pepper")
        with open(self.pepper, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(self.pepper, 0o600)
        self.users = os.path.join(self.dir, "users")
        htpasswd(self.users, "alice", password, cost=cost, create=True)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)

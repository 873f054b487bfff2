"""The demo server behind tools/demo (see there)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("top_builddir", os.path.join(HERE, "..", "build"))
from harness import Httpd, htpasswd  # noqa: E402

DIR = os.environ.get("AUTHN_HMAC_DEMO_DIR", "/tmp/authn_hmac_demo")
PORT = int(os.environ.get("AUTHN_HMAC_DEMO_PORT", "8080"))
USER, PASSWORD = "demo", "demo-password"

BODY = """
<Location />
    AuthType Basic
    AuthName "mod_authn_hmac demo"
    AuthBasicProvider hmac
    AuthHMACUserFile "{d}/demo.htpasswd"
    AuthHMACCacheTTL 300
    Require valid-user
</Location>
"""


def write_site(docroot):
    """A page that pulls 40 sub-resources, like a MediaWiki page does."""
    tags = []
    for i in range(14):
        with open(os.path.join(docroot, "style%02d.css" % i), "w") as f:
            f.write(".c%d { margin: %dpx }\n" % (i, i) * 200)
        tags.append('<link rel="stylesheet" href="style%02d.css">' % i)
    for i in range(13):
        with open(os.path.join(docroot, "script%02d.js" % i), "w") as f:
            f.write("var v%d = %d;\n" % (i, i) * 200)
        tags.append('<script src="script%02d.js"></script>' % i)
    for i in range(13):
        with open(os.path.join(docroot, "image%02d.svg" % i), "w") as f:
            f.write('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40">'
                    '<circle cx="20" cy="20" r="%d" fill="#%02x6699"/></svg>\n' % (5 + i, 16 * i))
        tags.append('<img src="image%02d.svg" alt="">' % i)
    with open(os.path.join(docroot, "index.html"), "w") as f:
        f.write("<!doctype html><html><head><title>mod_authn_hmac demo</title>\n%s\n"
                "</head><body><h1>Logged in</h1><p>40 sub-resources, one bcrypt.</p>"
                '<p><a href="/authn-hmac-status">counters</a></p>\n%s\n</body></html>\n'
                % ("\n".join(tags[:27]), "\n".join(tags[27:])))


def main():
    srv = Httpd(mpm="event", name="demo", port=PORT, directory=DIR)
    if sys.argv[1:] == ["stop"]:
        srv.stop()
        print("demo stopped")
        return
    srv.stop()  # a previous demo, if any
    srv.body = BODY.format(d=DIR)
    srv.global_conf = "AddType text/css .css\nAddType text/javascript .js\n" \
                      "AddType image/svg+xml .svg\nAddType text/html .html"
    srv.write_config()
    write_site(srv.path("htdocs"))
    htpasswd(srv.path("demo.htpasswd"), USER, PASSWORD, cost=12, create=True)
    rc, out = srv.configtest()
    if rc != 0:
        sys.exit(out)
    srv.start()
    print("mod_authn_hmac demo is running (event MPM, shared-memory cache)\n"
          "  URL:      %s/\n"
          "  login:    %s / %s   (bcrypt, cost 12)\n"
          "  counters: %s/authn-hmac-status   (?json for JSON)\n"
          "  logs:     %s/logs/\n"
          "  stop:     tools/demo stop" % (srv.url, USER, PASSWORD, srv.url, DIR))


main()

"""The demo server behind tools/demo (see there)."""
import http.client
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Httpd, basic, hmac_location, htpasswd  # noqa: E402

DIR = os.environ.get("AUTHN_HMAC_DEMO_DIR", "/tmp/authn_hmac_demo")
PORT = int(os.environ.get("AUTHN_HMAC_DEMO_PORT", "8080"))
USER, PASSWORD = "demo", "demo-password"



def site(d):
    """/ is served through mod_authn_hmac; /stock/ is the same site through
    stock mod_authn_file on the same htpasswd file, for the comparison."""
    users = d + "/demo.htpasswd"
    return 'Alias /stock/ "%s/htdocs/"\n' % d \
        + hmac_location("/stock/", users, "stock mod_authn_file", provider="file") \
        + hmac_location('"^/(?!stock/|authn-hmac-status)"', users, "mod_authn_hmac demo",
                        "AuthHMACCacheTTL 300", section="LocationMatch")


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


def page_load(port, prefix, connections=6):
    """Seconds to fetch prefix's page, then its sub-resources over
    `connections` keep-alive connections, as a browser does."""
    auth = basic(USER, PASSWORD)
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", prefix, headers={"Authorization": auth})
    r = c.getresponse()
    page = r.read().decode()
    if r.status != 200:
        raise SystemExit("demo: %s answered %d" % (prefix, r.status))
    todo = [prefix + u for u in re.findall(r'(?:href|src)="([\w.]+)"', page)]
    lock, failed = threading.Lock(), []

    def worker(conn):
        while True:
            with lock:
                if not todo:
                    return
                url = todo.pop()
            conn.request("GET", url, headers={"Authorization": auth})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                failed.append((url, resp.status))
    conns = [c] + [http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                   for _ in range(connections - 1)]
    threads = [threading.Thread(target=worker, args=(x,)) for x in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x in conns:
        x.close()
    if failed:
        raise SystemExit("demo: failed requests: %s" % failed)
    return time.monotonic() - t0


def main():
    # NB: the module as an admin gets it: its defaults, as the harness has.
    srv = Httpd(mpm="event", name="demo", port=PORT, directory=DIR)
    if sys.argv[1:] == ["stop"]:
        srv.stop()
        print("demo stopped")
        return
    srv.stop()  # a previous demo, if any
    srv.body = site(DIR)
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
    print("\nMeasuring a page load (the page and its 40 sub-resources over 6\n"
          "connections, as a browser fetches them), bcrypt cost 12 ...", flush=True)
    stock = page_load(PORT, "/stock/")
    first = page_load(PORT, "/")
    warm = min(page_load(PORT, "/") for _ in range(3))
    print("  stock mod_authn_file (%s/stock/):  %6.2f s   (bcrypt on every request)\n"
          "  mod_authn_hmac, first visit:         %6.2f s   (one bcrypt)\n"
          "  mod_authn_hmac, next visits:         %6.3f s   (no bcrypt)\n"
          "  hmac is %.0fx faster than stock on a visit after the first."
          % (srv.url, stock, first, warm, stock / warm))


main()

"""The benchmarks behind tools/bench, one module each; common.py holds what
they share (the options every run has, the bench's httpd and site, ab with
the server's CPU time, the warm-ups, the figures' helpers).

A benchmark is a module here with:

- add_args(parser): its options, the first being the one that runs it
  (--name, action="store_true"), each in --help in the table's order;
- run(args): prints its figures (markdown on stdout, progress on stderr
  through common.log) and returns the exit status (1: a target missed);
- optionally check_args(args, parser): its options' defaults (--quick's
  too) and checks, called for every benchmark whichever runs;
- optionally SECONDS, ROUNDS and QUICK_ROUNDS: its defaults for the shared
  --seconds and --rounds (the default run's: 8, 3 and 1; --quick: 2 s).

run gets the parsed options after common.setup: the binaries checked and
given to the harness, args.pin_cpu / args.why_no_pin (ab's CPU) and
args.redis_skip (why there is no Redis, or None). common.with_tmp(args,
body) runs body(args, tmp) in a temporary directory removed after it.

To add one: the module, and one line in the BENCHES table of tools/bench.
The first benchmark in the table whose option is given runs; none: the
default run (default.py). The harness (harness/ at the tree's top) is on
sys.path: `from harness import Httpd, htpasswd`.
"""

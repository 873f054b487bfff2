"""Processes and their CPU time, from /proc."""
import os
import time


def proc_stat(pid):
    """Fields 3.. of /proc/<pid>/stat (state, ppid, ...), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()


def exited(pid):
    """Whether pid has ended: gone, or a zombie. httpd -k start detaches
    its parent from us, so init reaps it, and some inits do that only
    every second or two."""
    st = proc_stat(pid)
    return st is None or st[0] == "Z"


def wait_exited(pid, tries=200):
    """Whether pid (None: there is none) has exited, looked at every
    0.05 s, tries times at most (10 s)."""
    for _ in range(tries):
        if not pid or exited(pid):
            return True
        time.sleep(0.05)
    return False


def children(parent):
    """PIDs of parent's children, sorted."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(int(d))
            if st and int(st[1]) == parent:
                kids.append(int(d))
    return sorted(kids)


def cpu_ticks(pids):
    """utime + stime (fields 14 and 15) of pids, in clock ticks."""
    total = 0
    for pid in pids:
        st = proc_stat(pid)
        if st:
            total += int(st[11]) + int(st[12])
    return total


def rss_kb(pid):
    """Resident set size of pid in KB, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def smaps_rollup(pid):
    """The kB fields of /proc/<pid>/smaps_rollup (Rss, Pss, Pss_Anon,
    Pss_File, Pss_Shmem, ...), or None if pid is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1])
    return out


def busy_ticks():
    """CPU time of the whole machine: user nice system irq softirq steal."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4]  # guest time is already counted in user

#!/usr/bin/env python3
"""The shadow corpus's runner (started by scripts/corpus/run, after scripts/corpus/setup).

Each program of PROGRAMS runs under `vmspace shadow --keep-going --baseline --json FILE` (the program once
untraced, then traced with every memory call mirrored into the engine and the maps compared after each). Per
program it collects the calls mirrored by kind, the differences (each report: the call, both results, the maps
lines that differ), the resynchronisations, the program's exit status and the time with and without the
shadow, prints one table, and writes everything as one JSON file (--json).

A difference is explained when a line of scripts/corpus/known-differences (`PROGRAM REGEX DIVERGENCES-TOPIC`)
names its program (or `*`) and its regular expression matches the difference's report; each such line names
the entry of docs/DIVERGENCES.md that gives the kernel's reason. Exit status 0 when every difference is
explained and every program exited as it does untraced, 1 otherwise, 2 on bad usage.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# name -> shell command run in a fresh temporary directory ($W: that directory, $C: scripts/corpus, $M: the
# compiled memcorpus). Each command makes and removes its own files, so that --baseline's untraced run and the
# traced run start alike.
PROGRAMS = [
    ("pipeline", "ls -l /usr/bin | sort -k5 -n | tail -n 20 | wc -l; seq 1 2000 | grep 7 | sort -r | head -3"),
    ("python3", 'python3 "$C/alloc.py"'),
    ("perl", "perl -e 'my %h; for my $i (1..50000) { $h{\"k$i\"} = \"v\" x ($i % 97) } "
     "my @s = sort { length($h{$a}) <=> length($h{$b}) } keys %h; my $t = join(\",\", @s[0..999]); "
     "$t =~ s/k(\\d+)/$1*2/ge; print length($t), \"\\n\"'"),
    ("gcc", 'd=$(mktemp -d) && cp "$C/make/"*.c "$d" && cd "$d" && gcc -O2 -o prog main.c part1.c part2.c '
     'part3.c part4.c && ./prog; s=$?; rm -rf "$d"; exit $s'),
    ("make-j2", 'd=$(mktemp -d) && cp "$C/make/"* "$d" && make -s -j2 -C "$d" && "$d/prog"; s=$?; rm -rf "$d"; exit $s'),
    ("cargo", 'd=$(mktemp -d) && mkdir -p "$d/src" && printf \'[package]\\nname = "corpus"\\nversion = "0.1.0"\\n'
     'edition = "2021"\\n\' > "$d/Cargo.toml" && printf \'fn main() { let v: Vec<u64> = (0..1000).collect(); '
     'println!("{}", v.iter().sum::<u64>()); }\\n\' > "$d/src/main.rs" && '
     'cargo build -q --offline --manifest-path "$d/Cargo.toml" && "$d/target/debug/corpus"; s=$?; rm -rf "$d"; exit $s'),
    ("sqlite3", 'd=$(mktemp -d) && { echo "create table t(a integer primary key, b text); begin;"; '
     'for i in $(seq 1 3000); do echo "insert into t(b) values (printf(\'%0*d\', $i % 200, $i));"; done; '
     'echo "commit; create index tb on t(b); select count(*), sum(length(b)) from t;"; } | sqlite3 "$d/db"; '
     's=$?; rm -rf "$d"; exit $s'),
    ("git", 'd=$(mktemp -d) && cd "$d" && git init -q && for i in 1 2 3; do seq 1 $((i * 500)) > f$i; '
     'git add f$i && git -c user.name=corpus -c user.email=corpus@localhost commit -q -m "c$i"; done && '
     'git log --oneline | wc -l && git gc -q; s=$?; rm -rf "$d"; exit $s'),
    ("java", 'd=$(mktemp -d) && cp "$C/Threads.java" "$d" && java -Xmx256m "$d/Threads.java"; s=$?; rm -rf "$d"; exit $s'),
    # stress-ng's memory stressors (Debian's stress-ng), ten at once, each bounded by its operation count and
    # the 10 s timeout (a stressor stopped by the timeout still ends the run successfully): mmap/munmap with
    # every protection and flag, mremap growing and moving, brk up and down, stack growth, mlock, mmap in forked
    # children, the vm stressor's access patterns, MAP_FIXED at random hints, msync and memfd mappings.
    ("stress-ng", 'stress-ng --temp-path "$W" --mmap 1 --mmap-ops 3 --mremap 1 --mremap-ops 3 --brk 1 '
     '--brk-ops 100 --stack 1 --stack-ops 3 --mlock 1 --mlock-ops 2 --mmapfork 1 --mmapfork-ops 1 --vm 1 '
     '--vm-ops 5 --mmapfixed 1 --mmapfixed-ops 5 --msync 1 --msync-ops 5 --memfd 1 --memfd-ops 2 --timeout 10'),
    ("c-stacks", '"$M" stacks'),
    ("c-remap", '"$M" remap'),
    ("c-jit", '"$M" jit'),
    ("c-madvise", '"$M" madvise'),
    ("c-fork", '"$M" fork'),
]


def java_can_launch_source():
    if not shutil.which("java"):
        return False
    r = subprocess.run(["java", "--list-modules"], capture_output=True, text=True)
    return any(line.startswith("jdk.compiler@") for line in r.stdout.splitlines())


def known_differences():
    out = []
    path = os.path.join(HERE, "known-differences")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) != 3:
                sys.exit(f"{path}:{n}: expected PROGRAM REGEX TOPIC")
            out.append((parts[0], re.compile(parts[1], re.S), parts[2]))
    return out


def explain(known, program, report):
    for prog, rx, topic in known:
        if prog in ("*", program) and rx.search(report):
            return topic
    return None


def vmspace_binary(arg):
    if arg:
        return os.path.abspath(arg)
    if os.environ.get("VMSPACE"):
        return os.path.abspath(os.environ["VMSPACE"])
    for profile in ("release", "debug"):
        p = os.path.join(ROOT, "target", profile, "vmspace")
        if os.path.exists(p):
            return p
    sys.exit("no vmspace binary: build one (cargo build -p vmspace) or pass --vmspace PATH")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vmspace", help="the vmspace binary (default: $VMSPACE, else target/release, target/debug)")
    ap.add_argument("--json", help="write the corpus's results as JSON to this file")
    ap.add_argument("--only", action="append", default=[], help="run only this program (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the programs and exit")
    ap.add_argument("--keep", help="keep each program's shadow JSON and output in this directory")
    ap.add_argument("--smaps", action="store_true",
                    help="run each program with `vmspace shadow --smaps` (compare the page-independent smaps "
                         "fields after every call too)")
    args = ap.parse_args()
    if args.list:
        for name, cmd in PROGRAMS:
            print(f"{name}: {cmd}")
        return 0
    names = [n for n, _ in PROGRAMS]
    for o in args.only:
        if o not in names:
            print(f"unknown program {o!r} (--list shows them)", file=sys.stderr)
            return 2
    vm = vmspace_binary(args.vmspace)
    known = known_differences()
    work = tempfile.mkdtemp(prefix="vmspace-corpus-")
    keep = args.keep or work
    os.makedirs(keep, exist_ok=True)
    memcorpus = os.path.join(work, "memcorpus")
    subprocess.run(["cc", "-O1", "-Wall", "-pthread", "-o", memcorpus, os.path.join(HERE, "memcorpus.c")], check=True)
    env = dict(os.environ, C=HERE, M=memcorpus, W=work, VMSPACE_ALLOW_DEBUG_BUILD="1")
    results = []
    failed = False
    for name, cmd in PROGRAMS:
        if args.only and name not in args.only:
            continue
        if name == "java" and not java_can_launch_source():
            print(f"{name}: SKIPPED: no JDK here (java cannot launch a source file); scripts/corpus/setup "
                  "installs one where the package lists have it", file=sys.stderr)
            results.append({"program": name, "command": cmd, "skipped": "no JDK"})
            continue
        out_json = os.path.join(keep, f"{name}.json")
        start = time.monotonic()
        shadow = [vm, "shadow", "--keep-going", "--baseline", "--json", out_json] + (["--smaps"] if args.smaps else [])
        p = subprocess.run(shadow + ["--", "/bin/sh", "-c", cmd],
                           cwd=work, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        with open(os.path.join(keep, f"{name}.out"), "w") as f:
            f.write(p.stdout + p.stderr)
        r = {"program": name, "command": cmd, "vmspace_status": p.returncode, "wall_s": round(wall, 3)}
        try:
            with open(out_json) as f:
                rep = json.load(f)["reports"][0]
        except (OSError, ValueError, KeyError, IndexError) as e:
            r["error"] = f"no shadow JSON ({e}); vmspace said:\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
            results.append(r)
            failed = True
            continue
        summ = {k: v["median"] for k, v in rep["summary"].items()}
        r["calls"] = {k[len("calls."):]: int(v) for k, v in summ.items() if k.startswith("calls.") and k != "calls.total"}
        r["calls_total"] = int(summ.get("calls.total", 0))
        r["time_traced_s"] = summ.get("time_traced_s")
        r["time_untraced_s"] = summ.get("time_untraced_s")
        r["exit_status"] = next((n[len("program: "):] for n in rep.get("notes", []) if n.startswith("program: ")), "?")
        r["resyncs"] = [n[len("resync: "):] for n in rep.get("notes", []) if n.startswith("resync: ")]
        r["differences"] = []
        for d in rep.get("output", []) or []:
            topic = explain(known, name, d)
            r["differences"].append({"report": d, "explained_by": topic})
        r["unexplained"] = sum(1 for d in r["differences"] if d["explained_by"] is None)
        if r["unexplained"] or r["exit_status"] != "exit status 0":
            failed = True
        results.append(r)
    print_table(results)
    for r in results:
        for i, d in enumerate(r.get("differences", []), 1):
            if d["explained_by"] is None:
                print(f"\n{r['program']}: UNEXPLAINED difference {i}:\n{d['report']}")
        if r.get("error"):
            print(f"\n{r['program']}: {r['error']}")
        if r.get("exit_status", "exit status 0") != "exit status 0":
            print(f"\n{r['program']}: the program's own status under the shadow: {r['exit_status']} "
                  f"(output in {keep}/{r['program']}.out)")
    doc = {
        "schema": "vmspace-shadow-corpus/1",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "vmspace": vm,
        "commit": git(["rev-parse", "HEAD"]),
        "dirty": bool(git(["status", "--porcelain", "--untracked-files=no"])),
        "cpu": cpu_model(),
        "kernel": os.uname().release,
        "smaps": args.smaps,
        "programs": results,
        "passed": not failed,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("\ncorpus: " + ("every difference explained, every program as untraced" if not failed else "FAILED"))
    return 1 if failed else 0


def git(a):
    r = subprocess.run(["git", "-C", ROOT] + a, capture_output=True, text=True)
    return r.stdout.strip()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def print_table(results):
    kinds = ["mmap", "munmap", "mprotect", "mremap", "madvise", "brk"]
    head = f"{'program':<10} {'exit':>5} {'calls':>7} " + " ".join(f"{k:>8}" for k in kinds)
    head += f" {'other':>6} {'diff':>5} {'expl':>5} {'resync':>6} {'untraced':>9} {'shadow':>8} {'x':>6} {'us/call':>8}"
    print(head)
    for r in results:
        if "skipped" in r:
            print(f"{r['program']:<10} skipped: {r['skipped']}")
            continue
        if "error" in r:
            print(f"{r['program']:<10} error")
            continue
        c = r["calls"]
        other = r["calls_total"] - sum(c.get(k, 0) for k in kinds)
        ex = r["exit_status"].replace("exit status ", "")
        ex = ex if len(ex) <= 5 else "sig"
        nd = len(r["differences"])
        ne = nd - r["unexplained"]
        t, u = r["time_traced_s"], r["time_untraced_s"]
        ratio = f"{t / u:6.1f}" if u else "     -"
        per = f"{(t - u) / r['calls_total'] * 1e6:8.0f}" if u is not None and r["calls_total"] else "       -"
        row = f"{r['program']:<10} {ex:>5} {r['calls_total']:>7} " + " ".join(f"{c.get(k, 0):>8}" for k in kinds)
        row += f" {other:>6} {nd:>5} {ne:>5} {len(r['resyncs']):>6} {u or 0:>9.3f} {t:>8.3f} {ratio} {per}"
        print(row)


if __name__ == "__main__":
    sys.exit(main())

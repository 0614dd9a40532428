"""Driver of bench/network.sh: start-up overhead of an allowlist profile, download and upload throughput."""
import http.server, json, os, statistics, subprocess, sys, tempfile, threading, time

sandbox, n = sys.argv[1], int(sys.argv[2])
ADDR, PORT, SIZE = "198.18.250.2", 8080, 100 << 20
CHUNK = b"x" * (1 << 20)

class Blob(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(SIZE))
        self.end_headers()
        for _ in range(SIZE // len(CHUNK)):
            self.wfile.write(CHUNK)
    def do_POST(self):
        n, got = int(self.headers["Content-Length"]), 0
        while got < n:
            b = self.rfile.read(min(1 << 20, n - got))
            if not b:
                break
            got += len(b)
        body = str(got).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

CLIENT = f"""
import time, urllib.request
t = time.perf_counter()
r = urllib.request.urlopen("http://{ADDR}:{PORT}/blob", timeout=60)
n = 0
while True:
    b = r.read(1 << 20)
    if not b:
        break
    n += len(b)
dt = time.perf_counter() - t
print(n, dt)
"""

UPLOAD = f"""
import time, urllib.request
data = b"z" * {SIZE}
t = time.perf_counter()
got = urllib.request.urlopen(urllib.request.Request("http://{ADDR}:{PORT}/", data=data, method="POST"), timeout=60).read()
print(int(got), time.perf_counter() - t)
"""

def main():
    subprocess.run(["ip", "addr", "add", f"{ADDR}/32", "dev", "lo"], check=True)
    tmp = tempfile.mkdtemp(prefix="sandbox-netbench-")
    os.chmod(tmp, 0o755)
    try:
        server = http.server.ThreadingHTTPServer((ADDR, PORT), Blob)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        config = os.path.join(tmp, "config.toml")
        with open(config, "w") as f:
            f.write('[profiles.bench-none]\nlanguage = "python"\n'
                    f'[profiles.bench-net]\nlanguage = "python"\n[profiles.bench-net.network]\nallow = ["{ADDR}:{PORT}"]\n')
        base = [sandbox, "--config", config, "--data-dir", os.path.join(tmp, "data"), "run"]

        def run(profile, code):
            t = time.perf_counter()
            out = subprocess.run(base + ["--profile", profile, "-c", code], capture_output=True, text=True)
            dt = time.perf_counter() - t
            if out.returncode != 0:
                sys.exit(f"{profile} failed: {out.stdout}{out.stderr}")
            return dt * 1000, out.stdout

        for _ in range(3):
            run("bench-none", "pass"), run("bench-net", "pass")
        times = {"bench-none": [], "bench-net": []}
        for _ in range(n):
            for p in times:
                times[p].append(run(p, "pass")[0])
        q = lambda v, f: sorted(v)[min(len(v) - 1, int(f * len(v)))]
        print(f"start-up, `sandbox run -c pass`, N={n} each, interleaved (ms):")
        print("| profile | p50 | p95 |")
        print("|---|---|---|")
        for p, v in times.items():
            print(f"| {p} | {statistics.median(v):.1f} | {q(v, 0.95):.1f} |")
        print(f"allowlist overhead p50: +{statistics.median(times['bench-net']) - statistics.median(times['bench-none']):.1f} ms\n")

        for what, code in (("download", CLIENT), ("upload (POST)", UPLOAD)):
            host, inside = [], []
            for _ in range(3):
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
                host.append(int(out[0]) / float(out[1]) / (1 << 20))
                out = run("bench-net", code)[1].split()
                assert int(out[0]) == SIZE, out
                inside.append(int(out[0]) / float(out[1]) / (1 << 20))
            print(f"100 MiB HTTP {what}, allowed local server (MiB/s, median of 3):")
            print("| client | MiB/s |")
            print("|---|---|")
            print(f"| host python3 urllib | {statistics.median(host):.0f} |")
            print(f"| allowlist sandbox, same code | {statistics.median(inside):.0f} |")
            print(f"ratio: {statistics.median(inside) / statistics.median(host):.2f}\n")
    finally:
        subprocess.run(["ip", "addr", "del", f"{ADDR}/32", "dev", "lo"])
        subprocess.run(["rm", "-rf", tmp])

main()

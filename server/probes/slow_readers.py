#!/usr/bin/env python3
"""Issue 34 item 2 probe: N SSE streams from seq 0 of a ~3 MB session backlog,
each read at 1 byte/s; samples the server's RssAnon and the kernel's TCP
memory (/proc/net/sockstat `TCP: mem` pages x 4096) and times a victim's hello.
usage: slow_readers.py SERVER_BIN [N] [extra server args...]"""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request

binary = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 250
extra = sys.argv[3:]
db = tempfile.mktemp(suffix=".sqlite")
srv = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--db", db, "--faults", *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = srv.stdout.readline().strip().rsplit(" ", 1)[1]
host, port = base.removeprefix("http://").split(":")
port = int(port)

def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read() or b"null")

def rss_anon():
    for line in open(f"/proc/{srv.pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
def tcp_mem():
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            f = line.split()
            return int(f[f.index("mem") + 1]) * 4096

sid = call("POST", "/v1/sessions", {"title": "probe"})["session_id"]
text = "x" * 50_000
for _ in range(60):
    call("POST", "/v1/admin/events", {"scope": "session", "scope_id": sid, "type": "team.message",
                                      "data": {"from": "a", "to": "b", "text": text}})
call("POST", "/v1/admin/events", {"scope": "team", "scope_id": "victim", "type": "team.message",
                                  "data": {"from": "a", "to": "b", "text": "hi"}})
mb = 60 * 50_000 / 1e6
print(f"{binary}: {n} readers, backlog {mb:.1f} MB, idle RssAnon {rss_anon()/1e6:.0f} MB, TCP mem {tcp_mem()/1e6:.0f} MB", flush=True)

def open_stream(path):
    s = socket.create_connection((host, port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
    return s

t0 = time.time()
socks = [open_stream(f"/v1/sessions/{sid}/events?after_seq=0") for _ in range(n)]
for s in socks:
    s.setblocking(False)
opened = time.time()
time.sleep(float(os.environ.get("VICTIM_DELAY", "1")))
vt = time.time()
v = open_stream("/v1/teams/victim/events?after_seq=0")
v.settimeout(30)
got = b""
while b"event: hello" not in got:
    chunk = v.recv(4096)
    if not chunk:
        break
    got += chunk
hello = time.time() - vt
v.close()
print(f"victim hello after {hello*1000:.0f} ms", flush=True)

peak_rss = peak_tcp = 0
ended_at = None
last_read = 0
while time.time() - opened < 45:
    now = time.time()
    if now - last_read >= 1:
        last_read = now
        for s in socks:
            try:
                s.recv(1)
            except (BlockingIOError, OSError):
                pass
    r, t = rss_anon(), tcp_mem()
    peak_rss, peak_tcp = max(peak_rss, r), max(peak_tcp, t)
    c = call("GET", "/v1/diagnostics/comms")
    if ended_at is None and c["streams_open"] == 0:
        ended_at = now - opened
    el = now - opened
    if int(el * 2) % 10 == 0:
        print(f"  t={el:4.1f}s RssAnon {r/1e6:6.1f} MB  TCP mem {t/1e6:6.1f} MB  streams_open {c['streams_open']}"
              f"  stream_buffer {c.get('stream_buffer_bytes')}", flush=True)
    if ended_at is not None and el > ended_at + 2:
        break
    time.sleep(0.5)
print(f"RESULT peak RssAnon {peak_rss/1e6:.0f} MB, peak TCP mem {peak_tcp/1e6:.0f} MB, "
      f"all streams ended after {ended_at if ended_at is None else round(ended_at,1)} s, victim hello {hello*1000:.0f} ms", flush=True)
for s in socks:
    s.close()
srv.terminate()
srv.wait()
for suf in ("", "-wal", "-shm"):
    try: os.remove(db + suf)
    except OSError: pass

#!/bin/bash
# Reference solution: a stdlib http.server app, started detached so it outlives this shell.
set -euo pipefail
cat > /app/server.py <<'PY'
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

with open("/app/inventory.json") as f:
    ITEMS = json.load(f)["items"]
BY_SKU = {item["sku"]: item for item in ITEMS}


class Handler(BaseHTTPRequestHandler):
    def send(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            return self.send(200, "ok", "text/plain")
        if url.path.startswith("/items/"):
            item = BY_SKU.get(url.path[len("/items/"):])
            return self.send(200, item) if item else self.send(404, {"error": "not found"})
        if url.path == "/stock-value":
            return self.send(200, {"total": round(sum(i["qty"] * i["price"] for i in ITEMS), 2)})
        if url.path == "/low-stock":
            threshold = int(parse_qs(url.query).get("threshold", ["5"])[0])
            return self.send(200, sorted(i["sku"] for i in ITEMS if i["qty"] < threshold))
        self.send(404, {"error": "not found"})

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", 8765), Handler).serve_forever()
PY
setsid nohup python3 /app/server.py > /app/server.log 2>&1 < /dev/null &
# wait until it answers
for _ in $(seq 50); do
  python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8765/health", timeout=1)' 2>/dev/null && exit 0
  sleep 0.1
done
echo "server did not start" >&2; exit 1

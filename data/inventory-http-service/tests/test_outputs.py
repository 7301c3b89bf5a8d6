"""Verifier for inventory-http-service: talks to the running service over loopback."""
import json
import os
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = "http://127.0.0.1:8765"
ITEMS = json.load(open(os.path.join(HERE, "inventory.json")))["items"]


_already_waited = []


def get(path):
    """Returns (status, content_type, body bytes); the first call waits up to 5 s for the port."""
    deadline = time.time() + (0 if _already_waited else 5)
    _already_waited.append(True)
    while True:
        try:
            with urllib.request.urlopen(BASE + path, timeout=5) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Content-Type", ""), err.read()
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_health():
    status, _, body = get("/health")
    assert status == 200
    assert body.decode().strip() == "ok"


def test_item_lookup_and_404():
    for item in (ITEMS[0], ITEMS[5], ITEMS[-1]):
        status, ctype, body = get("/items/" + item["sku"])
        assert status == 200
        assert ctype.split(";")[0].strip() == "application/json"
        assert json.loads(body) == item
    status, _, _ = get("/items/SKU-000Z")
    assert status == 404


def test_stock_value():
    status, ctype, body = get("/stock-value")
    assert status == 200
    assert ctype.split(";")[0].strip() == "application/json"
    want = round(sum(i["qty"] * i["price"] for i in ITEMS), 2)
    got = json.loads(body)
    assert set(got) == {"total"}
    assert abs(got["total"] - want) < 0.005


def test_low_stock_threshold_and_default():
    for query, threshold in (("?threshold=4", 4), ("?threshold=13", 13), ("?threshold=0", 0), ("", 5)):
        status, _, body = get("/low-stock" + query)
        assert status == 200, query
        assert json.loads(body) == sorted(i["sku"] for i in ITEMS if i["qty"] < threshold), query

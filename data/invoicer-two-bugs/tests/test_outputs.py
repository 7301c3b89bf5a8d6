"""Verifier for invoicer-two-bugs: the fixed package is compared with an independent reference."""
import os
import random
import subprocess
import textwrap
from decimal import ROUND_HALF_UP, Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
CENT = Decimal("0.01")


def reference(text):
    """Independent implementation of the README: returns the expected CLI output."""
    lines, grand = [], Decimal("0.00")
    inv = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.partition(" ")
        if key == "invoice":
            inv = {"number": rest.strip(), "items": [], "discount": Decimal(0), "tax": Decimal(0)}
        elif key == "item":
            qty, price, _ = rest.split(" ", 2)
            inv["items"].append(int(qty) * Decimal(price))
        elif key in ("discount", "tax"):
            inv[key] = Decimal(rest.rstrip("%"))
        elif key == "end":
            subtotal = sum(inv["items"], Decimal(0))
            discount = (subtotal * inv["discount"] / 100).quantize(CENT, ROUND_HALF_UP)
            tax = ((subtotal - discount) * inv["tax"] / 100).quantize(CENT, ROUND_HALF_UP)
            total = (subtotal - discount + tax).quantize(CENT, ROUND_HALF_UP)
            grand += total
            lines.append(f"{inv['number']} subtotal={subtotal.quantize(CENT)} discount={discount} "
                         f"tax={tax} total={total}")
    lines.append(f"GRAND TOTAL {grand}")
    return "\n".join(lines) + "\n"


def run_cli(tmp_path, text):
    batch = tmp_path / "batch.txt"
    batch.write_text(text)
    result = subprocess.run(["python3", "-m", "invoicer", str(batch)], cwd="/app",
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_half_up_rounding_on_single_invoices(tmp_path):
    # 10.00 * 8.25% = 0.825 and 12.25 * 10% = 1.225: both must round up
    for text in ("invoice S-1\ncustomer A\nitem 1 10.00 pass\ntax 8.25\nend\n",
                 "invoice S-2\ncustomer B\nitem 1 12.25 book\ndiscount 10\nend\n"):
        assert run_cli(tmp_path, text) == reference(text)


def test_percentages_do_not_leak_between_invoices(tmp_path):
    # amounts chosen so that no rounding happens at all: only the leak can break this
    text = textwrap.dedent("""\
        invoice L-1
        customer First
        item 1 100.00 thing
        discount 10
        tax 20
        end
        invoice L-2
        customer Second
        item 2 25.00 other thing
        end
        invoice L-3
        customer Third
        item 1 20.00 third thing
        tax 10
        end
        """)
    assert run_cli(tmp_path, text) == reference(text)


def test_api_is_stateless_across_calls():
    code = textwrap.dedent("""\
        import invoicer
        first = "invoice A\\nitem 1 50.00 x\\ndiscount 20\\ntax 10\\nend\\n"
        plain = "invoice B\\nitem 1 50.00 x\\nend\\n"
        invoicer.parse_invoices(first)
        (inv,) = invoicer.parse_invoices(plain)
        t = invoicer.invoice_totals(inv)
        print(t["discount"], t["tax"], t["total"])
        """)
    result = subprocess.run(["python3", "-c", code], cwd="/app", capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0.00", "0.00", "50.00"]


def test_generated_batch_matches_reference(tmp_path):
    rng = random.Random(13)  # seed chosen so that 3 invoices hit an exact half cent
    parts = []
    for n in range(40):
        parts.append(f"invoice G-{n:03d}\ncustomer Customer {n}")
        for _ in range(rng.randint(1, 4)):
            parts.append(f"item {rng.randint(1, 9)} {rng.randint(5, 9999) / 100:.2f} part {rng.randint(1, 99)}")
        if rng.random() < 0.5:
            parts.append(f"discount {rng.choice(['5', '10', '12.5%', '15', '2.5'])}")
        if rng.random() < 0.6:
            parts.append(f"tax {rng.choice(['7', '8.25', '19', '5.5%'])}")
        parts.append("end\n")
    text = "\n".join(parts)
    assert run_cli(tmp_path, text) == reference(text)


def test_march_totals_saved():
    with open(os.path.join(HERE, "march.txt")) as f:
        want = reference(f.read())
    with open("/app/march_totals.txt") as f:
        assert f.read() == want

"""Command line: python3 -m invoicer BATCH_FILE"""
import sys
from decimal import Decimal

from .parser import parse_invoices
from .pricing import invoice_totals


def format_line(invoice, totals):
    return (f"{invoice.number} subtotal={totals['subtotal']} discount={totals['discount']} "
            f"tax={totals['tax']} total={totals['total']}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python3 -m invoicer BATCH_FILE", file=sys.stderr)
        sys.exit(2)
    with open(argv[0]) as f:
        invoices = parse_invoices(f.read())
    grand_total = Decimal("0.00")
    for invoice in invoices:
        totals = invoice_totals(invoice)
        grand_total += totals["total"]
        print(format_line(invoice, totals))
    print(f"GRAND TOTAL {grand_total}")

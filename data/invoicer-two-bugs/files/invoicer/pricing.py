"""Money arithmetic: every amount is a Decimal; rounding rules are in README.md."""
from decimal import Decimal

CENT = Decimal("0.01")


def round_money(value):
    return value.quantize(CENT)


def invoice_totals(invoice):
    """Returns a dict with subtotal, discount, tax and total of one invoice (all Decimals)."""
    subtotal = sum((item.qty * item.unit_price for item in invoice.items), Decimal("0"))
    discount = round_money(subtotal * invoice.adjustments.discount_pct / 100)
    tax = round_money((subtotal - discount) * invoice.adjustments.tax_pct / 100)
    total = subtotal - discount + tax
    return {"subtotal": round_money(subtotal), "discount": discount, "tax": tax, "total": round_money(total)}

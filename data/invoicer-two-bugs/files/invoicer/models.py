"""Plain data classes for invoices."""
from dataclasses import dataclass, field
from decimal import Decimal


@dataclass
class LineItem:
    description: str
    qty: int
    unit_price: Decimal


@dataclass
class Adjustments:
    """Percentages applied on top of the line items (0 means none)."""
    discount_pct: Decimal = Decimal("0")
    tax_pct: Decimal = Decimal("0")


NO_ADJUSTMENTS = Adjustments()


class Invoice:
    def __init__(self, number, customer="", items=None, adjustments=NO_ADJUSTMENTS):
        self.number = number
        self.customer = customer
        self.items = list(items) if items is not None else []
        self.adjustments = adjustments

    def __repr__(self):
        return f"Invoice({self.number!r}, {self.customer!r}, {len(self.items)} items, {self.adjustments})"

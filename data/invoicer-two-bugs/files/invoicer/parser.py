"""Parser for the batch file format described in README.md."""
from decimal import Decimal, InvalidOperation

from .models import Invoice, LineItem


class ParseError(ValueError):
    pass


def _decimal(text, line_no):
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ParseError(f"line {line_no}: not a number: {text!r}") from None


def parse_invoices(text):
    """Returns the list of Invoice objects described by `text`, in file order."""
    invoices = []
    current = None
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "invoice":
            if current is not None:
                raise ParseError(f"line {line_no}: invoice {current.number} has no 'end'")
            current = Invoice(rest.strip())
            continue
        if current is None:
            raise ParseError(f"line {line_no}: {keyword!r} outside of an invoice")
        if keyword == "customer":
            current.customer = rest.strip()
        elif keyword == "item":
            qty, price, description = rest.split(" ", 2)
            current.items.append(LineItem(description, int(qty), _decimal(price, line_no)))
        elif keyword == "discount":
            current.adjustments.discount_pct = _decimal(rest.rstrip("%"), line_no)
        elif keyword == "tax":
            current.adjustments.tax_pct = _decimal(rest.rstrip("%"), line_no)
        elif keyword == "end":
            invoices.append(current)
            current = None
        else:
            raise ParseError(f"line {line_no}: unknown keyword {keyword!r}")
    if current is not None:
        raise ParseError(f"invoice {current.number} has no 'end'")
    return invoices

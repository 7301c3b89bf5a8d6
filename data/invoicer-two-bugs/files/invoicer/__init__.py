"""invoicer: compute invoice totals from a plain-text batch file (see README.md)."""
from .parser import parse_invoices
from .pricing import invoice_totals

__all__ = ["parse_invoices", "invoice_totals"]

"""Reports: one page per cube (`page.write_report`) built from the sections its model asks for,
drawn by one module per outcome (`antipodal`, `clustering`, `geometry`) on shared `figures`."""

from .page import write_report

__all__ = ["write_report"]

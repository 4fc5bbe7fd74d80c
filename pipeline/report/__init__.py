"""Reports: one page per cube (`page.write_report`) built from the sections its model asks for.

* `page`: the composer: header, the model's sections, agreement, warnings, provenance; writes
  report.md, report.html and summary.json. It imports the sections; they never import it.
* `tables` (fmt, row order, markdown rows) and `figures` (panels, titles, saving): the toolkits
  every section draws with; `html`: markdown to one self-contained page; `index`: many reports.
* One section module per outcome: `antipodal`, `horizon`, `dominant` (stochastic models),
  `clustering`, `overlaps` (sphere flows), `geometry`, `boolean_rate` (Euclidean flows), and those
  any cube may have: `class_counts`, `observables`; the page's `agreement`, `caveats` and
  `provenance` blocks.
* `search_page`: the page of an adaptive boundary search (`tokensweep boundary`), not of a cube.
"""

__all__ = ["write_report"]


def __getattr__(name):
    # `write_report` on first use: importing a submodule (the index, a command checking its
    # arguments) need not import every section, matplotlib and scipy (~2 s)
    if name == "write_report":
        from .page import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

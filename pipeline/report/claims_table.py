r"""The claims table of a report: every claim the cube's catalog entry makes, checked (`claims`).

`REGISTRY` maps a catalog entry's name to its checks (declared per paper: `claims_f26`,
`claims_glprp`, `claims_glpre`, `claims_rst`,
`claims_network`); a larger scale of an entry (`NAME-paper`) has its
entry's claims. A cube of no entry gets the claims any cube of its kind can be judged on: P(antipodal)
on the model's closed form where it has one, else one row saying that no claim is declared.
`check_claims` runs them (a check that raises gives a `not checked` row naming the error, never a
failed report), `claims_lines` draws the markdown table, `verdict_counts` counts the four verdicts
(the index's columns).
"""

from __future__ import annotations

from collections import Counter

from ..plugin import ReportInput
from ..spec.scales import SCALES
from .claims import KINDS, Claim, not_checked, verdict_kind
from .claims_common import closed_form
from .claims_f26 import CLAIMS as F26
from .claims_f26_flow import CLAIMS as F26_FLOW
from .claims_glpre import CLAIMS as GLPRE
from .claims_glprp import CLAIMS as GLPRP
from .claims_glprp_rates import CLAIMS as GLPRP_RATES
from .claims_network import CLAIMS as NETWORK
from .claims_rst import CLAIMS as RST

__all__ = ["REGISTRY", "entry_of", "check_claims", "claims_lines", "verdict_counts"]

REGISTRY = {**F26, **F26_FLOW, **GLPRP, **GLPRP_RATES, **GLPRE, **RST, **NETWORK}

GENERIC = closed_form("P(antipodal) per cell equals the model's closed form", "the model's theory",
                      "closed form (T = ∞) in every judged cell")


def entry_of(name: str) -> str | None:
    """The catalog entry whose claims a sweep of this name checks: the name, or the name less a
    scale suffix (`spec.scales.SCALES`: 'fedorov2026-fig3-paper' -> 'fedorov2026-fig3'); None for any other sweep.

    >>> entry_of("fedorov2026-fig3-paper"), entry_of("fedorov2026-fig3"), entry_of("mine")
    ('fedorov2026-fig3', 'fedorov2026-fig3', None)
    >>> entry_of("geshkovski2023-fig1-minilm")  # an entry of its own, not a scale of fig1
    'geshkovski2023-fig1-minilm'
    """
    if name in REGISTRY:
        return name
    stem, _, scale = name.rpartition("-")
    return stem if scale in SCALES and stem in REGISTRY else None


def check_claims(report: ReportInput) -> list[Claim]:
    """The claims of the report's cube, each checked (module docstring)."""
    entry = entry_of(report.sweep.name)
    checks = REGISTRY[entry] if entry is not None else (GENERIC,)
    out = []
    for check in checks:
        try:
            out.append(check(report))
        except Exception as err:  # one claim's failure to compute must not cost the page
            out.append(Claim(getattr(check, "__qualname__", "claim"), "", "—", "—",
                             not_checked(f"its check raised {type(err).__name__}: {err}")))
    if entry is None and out[0].verdict.startswith("not checked"):
        out = [Claim("no claim declared for this sweep", "—", "—", "—",
                     not_checked("no claims declared for it (pipeline/report/claims_*.py), and no closed "
                                 "form to compare"))]
    return out


def verdict_counts(claims) -> dict[str, int]:
    """{holds, fails, hypothesis not met, not checked: count}."""
    counted = Counter(verdict_kind(c["verdict"] if isinstance(c, dict) else c.verdict) for c in claims)
    return {kind: counted.get(kind, 0) for kind in KINDS}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_lines(claims: list[Claim], entry: str | None) -> list[str]:
    """The markdown section: the counts, then one row per claim."""
    counts = verdict_counts(claims)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    whose = f"catalog entry `{entry}`" if entry else "this sweep (no claims declared for its name)"
    lines = ["## Claims checked", "",
             f"Each claim of {whose}, judged on this cube: {summary}. A claim made for every trajectory "
             "is judged on every trajectory; a theorem's hypotheses are checked on the cube's own starts "
             "and parameters before its conclusion.", "",
             "| claim | source | measured | expected | verdict | detail |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(getattr(c, f)) for f in
                                ("claim", "source", "measured", "expected", "verdict", "detail")) + " |"
              for c in claims]
    return lines + [""]

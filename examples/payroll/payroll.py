#!/usr/bin/env python3
"""Monthly payroll: gross, social insurance, tax and net pay for each employee.

A Procession ``command:`` runner. It reads the session document on stdin, computes the
payroll of ``employees.csv`` with the grade rates of ``rates.csv`` (both in its working
folder), writes ``payroll-YYYY-MM.csv`` there, and answers in JSON Lines: a summary
message and the totals in working memory. On the 1st of the month (cron) it pays the month
that just ended; when the rates table changes it recomputes the current month.
"""

import csv
import datetime
import json
import sys
from pathlib import Path
from typing import Any


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def month_for(causes: list[dict[str, Any]]) -> str:
    now = datetime.date.today()
    for cause in causes:
        if cause.get("kind") == "cron":
            first = datetime.date.fromtimestamp(cause.get("due") or datetime.datetime.now().timestamp())
            previous = first.replace(day=1) - datetime.timedelta(days=1)
            return previous.strftime("%Y-%m")
    return now.strftime("%Y-%m")


def main() -> int:
    doc = json.load(sys.stdin)
    causes = doc["run"]["cause"]
    folder = Path.cwd()
    with open(folder / "rates.csv", newline="") as fh:
        rates = {r["grade"]: r for r in csv.DictReader(fh)}
    month = month_for(causes)
    lines: list[dict[str, Any]] = []
    totals = {"gross": 0.0, "social_insurance": 0.0, "tax": 0.0, "net": 0.0}
    with open(folder / "employees.csv", newline="") as fh:
        for e in csv.DictReader(fh):
            rate = rates.get(e["grade"])
            if rate is None:
                print(f"no rate for grade {e['grade']!r} (employee {e['name']})", file=sys.stderr)
                return 2
            gross = float(rate["hourly"]) * float(e["hours"])
            si = round(gross * float(rate["social_insurance"]), 2)
            tax = round((gross - si) * float(rate["income_tax"]), 2)
            net = round(gross - si - tax, 2)
            lines.append({"name": e["name"], "grade": e["grade"], "gross": round(gross, 2),
                          "social_insurance": si, "tax": tax, "net": net})
            for key, value in (("gross", gross), ("social_insurance", si), ("tax", tax), ("net", net)):
                totals[key] += value
    out = folder / f"payroll-{month}.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)
    totals = {k: round(v, 2) for k, v in totals.items()}
    why = ", ".join(sorted({c.get("kind", "manual") for c in causes})) or "manual"
    changed = [p for c in causes for p in c.get("paths", [])]
    note = f" ({', '.join(Path(p).name for p in changed)} changed)" if changed else ""
    emit(type="message", role="assistant",
         content=f"Payroll {month} for {len(lines)} employees, run by {why}{note}: gross {totals['gross']:,.2f},"
                 f" social insurance {totals['social_insurance']:,.2f}, tax {totals['tax']:,.2f},"
                 f" net {totals['net']:,.2f}. Written to {out.name}.")
    emit(type="memory", set={"last_month": month, "totals": totals, "employees": len(lines)})
    return 0


if __name__ == "__main__":
    sys.exit(main())

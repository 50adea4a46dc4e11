"""Billing periods."""

import datetime


def next_month(year, month):
    """The (year, month) after the given one."""
    return year, month + 1


def period_end(start):
    """The last day of the billing period that starts on `start` (a date on the 1st)."""
    y, m = next_month(start.year, start.month)
    return datetime.date(y, m, 1) - datetime.timedelta(days=1)


def periods(start, n):
    """`n` consecutive periods from `start`, as (first day, last day)."""
    out = []
    for _ in range(n):
        end = period_end(start)
        out.append((start, end))
        start = end + datetime.timedelta(days=1)
    return out

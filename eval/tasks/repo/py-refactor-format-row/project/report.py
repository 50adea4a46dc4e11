"""Plain-text reports."""


def sales_report(rows):
    out = []
    for name, value in rows:
        label = name.strip().title()
        out.append(f"{label:<20}{value:>10.2f}")
    return "\n".join(out)


def stock_report(rows):
    out = []
    for name, value in rows:
        label = name.strip().title()
        out.append(f"{label:<20}{value:>10.2f}")
    return "\n".join(out)


def cost_report(rows):
    out = []
    for name, value in rows:
        label = name.strip().title()
        out.append(f"{label:<20}{value:>10.2f}")
    return "\n".join(out)

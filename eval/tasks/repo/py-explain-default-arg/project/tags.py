"""Collects tags per document."""


def add_tag(tag, tags=[]):
    """Returns the tags with `tag` appended (a new list when none is given)."""
    tags.append(tag)
    return tags

"""What both adapters do the same way: split EngineOptions into plan keywords and load_into
keywords, and plan a rank from the headers alone, refusing before any byte is read."""

import wmap

from .source import redacted

# load_into's own keywords: the rest are the plan's.
_LOAD_INTO = ("ignore", "atomic", "verify", "manifest", "digests")


class UnsupportedLayout(ValueError):
    """A layout, feature or checkpoint wmap cannot load for the engine, found before any byte is read."""


def split_keywords(options, layout):
    """(plan keywords, load_into keywords) from EngineOptions and the rank's layout keywords."""
    keywords = dict(layout)
    keywords.update(options.keywords())
    into = {k: keywords.pop(k) for k in _LOAD_INTO if k in keywords}
    if "quiet" in keywords:
        into["quiet"] = keywords["quiet"]
    return keywords, into


def plan_or_refuse(source, keywords, engine, fallback):
    """wmap.plan(source, **keywords), or UnsupportedLayout naming every problem and `fallback`, the
    engine's own way to load the checkpoint."""
    shown = redacted(source)  # never a URL's credentials or query in a message
    try:
        plan = wmap.plan(source, **keywords)
    except (wmap.ValidationError, wmap.MalformedInputError) as e:
        raise UnsupportedLayout("wmap cannot load %s for %s: %s\n(%s's own loader may: %s)"
                                % (shown, engine, e, engine, fallback)) from e
    if not plan.ok:
        raise UnsupportedLayout("wmap cannot load %s for %s (%d problem(s), nothing was read):\n  %s\n"
                                "(%s's own loader may: %s)" % (shown, engine, len(plan.problems),
                                                              "\n  ".join(plan.problems), engine, fallback))
    return plan
